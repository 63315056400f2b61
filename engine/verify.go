package engine

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Verification makes the engine hold an object only once it has seen that
// the set's owner applied the object's declaration. It is for declarations
// that someone with less power than the engine could have written: Helm's
// release Secrets, for one, can be written by anyone who may write Secrets
// in the release namespace, and a declaration taken on trust would let them
// have the engine create or change objects they could not.
//
// An object is verified, and from then on held as usual, once the engine
// has seen it as declared (or differing only in the form the API server
// stores it in, which a server-side dry run of the correction shows). At
// the first check of an object alone, it is verified too when the
// differences are drift made after the owner's apply: one of Owners wrote
// the object at or after Since, and every field that differs holds a value
// that another manager wrote at or after Since.
//
// Until then it is never written. In particular an object that does not
// exist is not created; a field whose live value an Owner holds, for an
// older declaration, is not changed; and a field the object lacks is not
// added, since nothing tells a field the owner never applied from one that
// someone removed. Later edits never verify an object but by making it as
// declared: otherwise an admin's edit of a field held back would let the
// declaration through. See Result.Unverified.
//
// metadata.managedFields is the evidence: the API server keeps it, and
// writing it requires write access to the object itself. Its times have a
// resolution of one second, so a declaration written within the second of
// the owner's last write to an object, by someone who raced an admin's edit
// of that same object into that second, is the one case it cannot tell.
type Verification struct {
	// Owners are the field managers the owner writes with.
	Owners []string
	// Since is when the owner began applying this declaration: an owner's
	// write at or after it is taken to be of this declaration. The zero
	// time counts no owner write, so only objects already as declared are
	// verified.
	Since time.Time
	// Needed reports whether a declared object, as passed to Declare,
	// needs verifying. Nil means every object does. A caller whose
	// previous declaration was verified passes the objects it carries
	// over unchanged as not needing it.
	Needed func(declared *unstructured.Unstructured) bool
	// Fallback, if set, returns the object as the last verified
	// declaration had it, or nil if it had none. Until the object is
	// verified, the engine holds it at that instead: edits are reverted
	// to it and a deletion recreates it, so that a declaration nobody
	// verified never loosens the lock on an object it names.
	Fallback func(declared *unstructured.Unstructured) *unstructured.Unstructured
}

// Unverified is a declared object the engine does not hold, because it has
// not seen the set's owner apply it (see Verification).
type Unverified struct {
	Ref  ObjectRef
	Kind string
	// Missing says the object does not exist.
	Missing bool
	// Paths are where the live object differs from the declaration (at
	// most maxDriftPaths of them).
	Paths []string
	// Owned are those of Paths whose live value an owner holds: values
	// it applied, but for another declaration.
	Owned []string
}

// proof is the verification state of an object that needs it.
type proof struct {
	Unverified
	// checked is set once the object was found unverified, at
	// resourceVersion version ("" when missing), so that an unchanged
	// object is not checked again.
	checked bool
	version string
}

// needsProof reports whether obj must be verified before it is written.
func needsProof(spec ObjectSet, declared *unstructured.Unstructured) bool {
	v := spec.Verify
	return v != nil && (v.Needed == nil || v.Needed(declared))
}

// verify decides whether the drifted live object of an unverified obj may
// be corrected. It returns true once obj is verified; obj.inLine is set too
// when a server-side dry run of patch showed the drift to be one of form
// only (see noopPatch).
func (e *Engine) verify(ctx context.Context, s *objectSet, obj *lockedObject, live *unstructured.Unstructured, desired map[string]any, patch *mergePatch) (bool, error) {
	p := obj.proof
	if p.checked && p.version == live.GetResourceVersion() {
		return false, nil
	}
	spec := s.spec
	v := spec.Verify
	var paths []string
	diffPaths(nil, live.Object, desired, &paths, -1)
	k := e.rulesOf(obj).kindOf(desired)
	owned := ownedPaths(live, k, paths, v.Owners)
	if !p.checked && len(owned) == 0 && wroteSince(live, v.Owners, v.Since) && driftSince(live, k, desired, paths, v.Since) {
		e.proved(s, obj, live)
		obj.prove()
		return true, nil
	}
	out, err := e.writer(spec, obj.ref()).Patch(ctx, obj.ref().Name, patch.Type, patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, fmt.Errorf("dry-running the correction of an unverified object: %w", err)
	}
	if !obj.canonical {
		if declared, err := obj.declaration(); err == nil {
			_, _ = obj.storedDeclaration(e.rulesOf(obj), declared, out)
		}
	}
	if sameStored(out, live) {
		obj.writes().noop = &noopPatch{resourceVersion: live.GetResourceVersion(), data: string(patch.Data)}
		e.proved(s, obj, live)
		obj.settle()
		return true, nil
	}
	p.checked, p.version, p.Missing = true, live.GetResourceVersion(), false
	p.Paths, p.Owned = limitPaths(paths), limitPaths(owned)
	return false, nil
}

// holdFallback holds an unverified object at its last verified declaration
// (see Verification.Fallback); live is nil when the object is missing. It
// corrects as the revert does, fights and refusals alike, but the object
// stays unverified.
func (e *Engine) holdFallback(ctx context.Context, s *objectSet, obj *lockedObject, live *unstructured.Unstructured) (*Drift, error) {
	fallback := obj.fallback()
	if fallback == nil {
		return nil, nil
	}
	held, err := unpackDeclaration(fallback)
	if err != nil {
		return nil, err
	}
	if live == nil {
		drift := &Drift{Ref: obj.ref(), Kind: kindOf(held), Deleted: true}
		return drift, e.correct(ctx, s, obj, drift, "", func() error { return e.create(ctx, s.spec, obj, held) })
	}
	rules := e.rulesOf(obj)
	desired, err := obj.desired(rules, live.Object, held.Object)
	if err != nil {
		return nil, err
	}
	patch, err := computePatch(live.Object, desired)
	if err != nil || patch == nil {
		return nil, err
	}
	k := rules.kindOf(desired)
	paths := k.driftPaths(live.Object, desired)
	drift := &Drift{Ref: obj.ref(), Kind: kindOf(held), Paths: paths, Managers: attribute(live, k, paths, e.fieldManager)}
	return drift, e.correct(ctx, s, obj, drift, live.GetResourceVersion(), func() error {
		if s.spec.BeforeWrite != nil {
			if err := s.spec.BeforeWrite(ctx, Write{Ref: obj.ref(), Live: live, Restores: restores(live.Object, desired, paths)}); err != nil {
				return err
			}
		}
		if _, err := e.writer(s.spec, obj.ref()).Patch(ctx, obj.ref().Name, patch.Type, patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager}); err != nil {
			return shortRefusal("patching", err)
		}
		obj.fresh = true
		return nil
	})
}

// missing records that an unverified object does not exist.
func (p *proof) missing() {
	p.checked, p.version, p.Missing, p.Paths, p.Owned = true, "", true, nil, nil
}

func limitPaths(paths []string) []string {
	if len(paths) > maxDriftPaths {
		return paths[:maxDriftPaths]
	}
	return paths
}

// wroteSince reports whether one of managers wrote obj at or after since.
// managedFields keep times to the second, so since is too.
func wroteSince(obj *unstructured.Unstructured, managers []string, since time.Time) bool {
	if since.IsZero() {
		return false
	}
	since = since.Truncate(time.Second)
	for _, f := range obj.GetManagedFields() {
		if f.Subresource == "" && f.Time != nil && !f.Time.Time.Before(since) && slices.Contains(managers, f.Manager) {
			return true
		}
	}
	return false
}

// driftSince reports whether every one of paths, where live differs from
// desired, holds a value that some manager wrote at or after since: drift,
// not a field the owner never applied. A field live lacks proves nothing,
// unless the declared value is empty, as the API server drops empty maps
// and lists.
func driftSince(live *unstructured.Unstructured, k kindSchema, desired map[string]any, paths []string, since time.Time) bool {
	since = since.Truncate(time.Second)
	var sets []*fieldpath.Set
	for _, f := range live.GetManagedFields() {
		if f.Subresource != "" || f.FieldsV1 == nil || f.Time == nil || f.Time.Time.Before(since) {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(f.FieldsV1.Raw)); err == nil {
			sets = append(sets, s)
		}
	}
	for _, text := range paths {
		p, err := ParsePointer(text)
		if err != nil || len(p) == 0 {
			return false
		}
		if _, ok := p.get(live.Object); !ok {
			if d, _ := p.get(desired); !isEmpty(d) {
				return false
			}
			continue
		}
		found := false
		for _, s := range sets {
			found = found || owns(s, k, live.Object, p)
		}
		if !found {
			return false
		}
	}
	return true
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

// ownedPaths returns those of paths whose live value, or anything under
// it, one of managers owns.
func ownedPaths(live *unstructured.Unstructured, k kindSchema, paths []string, managers []string) []string {
	var sets []*fieldpath.Set
	for _, f := range live.GetManagedFields() {
		if f.Subresource != "" || f.FieldsV1 == nil || !slices.Contains(managers, f.Manager) {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(f.FieldsV1.Raw)); err == nil {
			sets = append(sets, s)
		}
	}
	var out []string
	for _, text := range paths {
		p, err := ParsePointer(text)
		if err != nil || len(p) == 0 {
			// The whole object differs; any owned field is in it.
			if len(sets) > 0 {
				out = append(out, text)
			}
			continue
		}
		for _, s := range sets {
			if owns(s, k, live.Object, p) {
				out = append(out, text)
				break
			}
		}
	}
	return out
}

// sameStored reports whether a and b are the same object as stored,
// bookkeeping aside: a dry run's answer carries the request's field
// manager even when it changed nothing.
func sameStored(a, b *unstructured.Unstructured) bool {
	return reflect.DeepEqual(withoutBookkeeping(a.Object), withoutBookkeeping(b.Object))
}

func withoutBookkeeping(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	if m, ok := obj["metadata"].(map[string]any); ok {
		md := make(map[string]any, len(m))
		for k, v := range m {
			md[k] = v
		}
		delete(md, "managedFields")
		delete(md, "resourceVersion")
		out["metadata"] = md
	}
	return out
}

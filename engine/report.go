package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ObjectDiff is one declared object that is not as declared.
type ObjectDiff struct {
	Ref  ObjectRef
	Kind string
	// Missing says the object does not exist.
	Missing bool
	// Paths are where it differs, named as in Drift.Paths.
	Paths []string
	// Managers are who changed the differing fields (see Manager).
	Managers []Manager
	// Text is a unified diff, in YAML, of the object as it is (---)
	// against the object as the lock would make it (+++): fields the
	// declaration leaves out, or ignores, are the same on both sides.
	// managedFields are left out of both.
	Text string
}

// Diff compares every object of key's set with the API server's copy, now,
// and returns those that are not as declared, ordered by ref. It reads
// every object and writes nothing: a mismatch that may be one of form only
// (a quantity written "1000m" and stored as "1") is dry-run, as the lock
// does before its first write, and is no difference if the API server would
// store the object unchanged. Objects whose kind is not served yet are
// returned as errors, joined.
func (e *Engine) Diff(ctx context.Context, key string) ([]ObjectDiff, error) {
	e.mu.Lock()
	s := e.sets[key]
	if s == nil {
		e.mu.Unlock()
		return nil, fmt.Errorf("no set is held under %q", key)
	}
	spec := s.spec
	objs := slices.Clone(s.objects)
	var errs []error
	for _, u := range s.unresolved {
		errs = append(errs, u.err)
	}
	e.mu.Unlock()
	sort.Slice(objs, func(i, j int) bool { return objs[i].ref().String() < objs[j].ref().String() })

	var out []ObjectDiff
	for _, obj := range objs {
		d, err := e.diffObject(ctx, spec, obj)
		if err != nil {
			errs = append(errs, &ObjectError{Ref: obj.ref(), Err: err})
			continue
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	return out, errors.Join(errs...)
}

// diffObject is Diff for one object: nil when it is as declared.
func (e *Engine) diffObject(ctx context.Context, spec ObjectSet, obj *lockedObject) (*ObjectDiff, error) {
	declared, err := obj.declaration()
	if err != nil {
		return nil, err
	}
	live, err := e.resource(obj.ref()).Get(ctx, obj.ref().Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		text, err := unifiedDiff(obj.ref().String(), nil, declared.Object)
		return &ObjectDiff{Ref: obj.ref(), Kind: kindOf(declared), Missing: true, Text: text}, err
	}
	if err != nil {
		return nil, err
	}
	rules, _ := e.schemas.rulesAt(obj.ref().GVR.GroupVersion())
	desired, err := obj.desired(rules, live.Object, declared.Object)
	if err != nil {
		return nil, err
	}
	patch, err := computePatch(live.Object, desired)
	if err != nil || patch == nil {
		return nil, err
	}
	stored, err := e.writer(spec, obj.ref()).Patch(ctx, obj.ref().Name, patch.Type, patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager, DryRun: []string{metav1.DryRunAll}})
	if err == nil && sameStored(stored, live) {
		return nil, nil
	}
	k := rules.kindOf(desired)
	paths := k.driftPaths(live.Object, desired)
	text, err := unifiedDiff(obj.ref().String(), live.Object, desired)
	if err != nil {
		return nil, err
	}
	return &ObjectDiff{Ref: obj.ref(), Kind: kindOf(declared), Paths: paths, Managers: attribute(live, k, paths, e.fieldManager), Text: text}, nil
}

// unifiedDiff renders from and to as YAML, without managedFields, and
// diffs them; a nil from is an object that does not exist.
func unifiedDiff(name string, from, to map[string]any) (string, error) {
	render := func(obj map[string]any) ([]string, error) {
		if obj == nil {
			return nil, nil
		}
		data, err := yaml.Marshal(withoutManagedFields(obj))
		if err != nil {
			return nil, err
		}
		return difflib.SplitLines(strings.TrimSuffix(string(data), "\n")), nil
	}
	a, err := render(from)
	if err != nil {
		return "", err
	}
	b, err := render(to)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: a, B: b, FromFile: name + " (live)", ToFile: name + " (declared)", Context: 3})
}

// withoutManagedFields returns obj, shallowly copied, without
// metadata.managedFields.
func withoutManagedFields(obj map[string]any) map[string]any {
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	if _, ok := meta["managedFields"]; !ok {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	out["metadata"] = m
	return out
}

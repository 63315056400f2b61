package engine

import (
	"context"
	"encoding/json"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"reflect"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// The merge rules of the objects the engine holds are Kubernetes' own: the
// list types (atomic, set, map and their keys) and map types of the schema
// the API server merges server-side applies with, read through
// sigs.k8s.io/structured-merge-diff, as the API server does. Strategic merge
// patch metadata, which the engine used before, knows one merge key per
// list: the UDP and TCP entries of a Service port 53 were one entry to it,
// and atomic lists were merged by position.

// builtinTypes is the schema of the built-in kinds client-go was generated
// with. Parsing it takes a moment, so it is read on first use.
var builtinTypes = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(scheme.Scheme)
})

// deducedTypes treats every list as atomic and every map as granular, as a
// JSON merge patch does: the rules for kinds without a schema here, such as
// custom resources.
var deducedTypes = managedfields.NewDeducedTypeConverter()

// mergeRules are the merge rules of one kind.
type mergeRules struct {
	types managedfields.TypeConverter
	// roots caches each kind's root type under types, for holds; nil
	// caches nothing.
	roots *sync.Map
}

// rulesOf returns the merge rules of obj's kind (see schemas.rules).
func (e *Engine) rulesOf(obj *lockedObject) mergeRules {
	return e.schemas.rules(obj.ref().GVR.GroupVersion())
}

// typed converts obj under r, falling back to the deduced rules for an
// object the schema does not describe (a field newer than client-go, say):
// holding it by the simpler rules beats not holding it.
func (r mergeRules) typed(obj map[string]any) (*typed.TypedValue, error) {
	u := &unstructured.Unstructured{Object: obj}
	tv, err := r.types.ObjectToTyped(u, typed.AllowDuplicates)
	if err != nil && r.types != deducedTypes {
		return deducedTypes.ObjectToTyped(u, typed.AllowDuplicates)
	}
	return tv, err
}

// desired returns the live object as it must be: every field the declared
// object sets holds the declared value; an atomic list or map the declared
// object sets is held whole; of a set or map list it sets, entries are
// matched by all their keys, each declared entry keeps what the server
// defaulted in the live one, and live entries not declared are removed; a
// union keeps only the declared member (see keepDeclaredMembers);
// everything else the live object has (fields the server defaulted, labels
// other actors added, metadata) stays as it is.
//
// It is what a server-side apply of the declaration would make of the live
// object if the applier owned every entry of the lists it declares.
func (r mergeRules) desired(live, declared map[string]any) (map[string]any, error) {
	lt, err := r.typed(live)
	if err != nil {
		return nil, fmt.Errorf("reading the live object by its schema: %w", err)
	}
	dt, err := r.typed(declared)
	if err != nil {
		return nil, fmt.Errorf("reading the declared object by its schema: %w", err)
	}
	owned, err := dt.ToFieldSet()
	if err != nil {
		return nil, err
	}
	present, err := lt.ToFieldSet()
	if err != nil {
		return nil, err
	}
	// Entries of declared lists that the declaration does not have are
	// drift: another actor added them.
	stale := fieldpath.NewSet()
	present.Iterate(func(p fieldpath.Path) {
		n := len(p)
		if n == 0 || !isListEntry(p[n-1]) || owned.Has(p) {
			return
		}
		if declaresEntries(owned, p[:n-1]) {
			stale.Insert(p)
		}
	})
	merged, err := lt.RemoveItems(stale).Merge(dt)
	if err != nil {
		return nil, fmt.Errorf("merging the declaration into the live object: %w", err)
	}
	out, ok := merged.AsValue().Unstructured().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("merged object is not a map")
	}
	if r.types == deducedTypes {
		keepItemDefaults(out, live, declared)
	}
	keepDeclaredMembers(out, declared)
	return out, nil
}

// keepItemDefaults merges, for a kind without a schema here, each entry of
// a declared list of objects with the live entry at the same position when
// both lists have the same length, so that what a CRD's schema defaults
// inside the entries is not taken for drift. The deduced rules hold such
// lists whole, which is right only for their length and order.
func keepItemDefaults(desired, live, declared map[string]any) {
	for k, dv := range declared {
		switch dv := dv.(type) {
		case map[string]any:
			sub, ok1 := desired[k].(map[string]any)
			lv, ok2 := live[k].(map[string]any)
			if ok1 && ok2 {
				keepItemDefaults(sub, lv, dv)
			}
		case []any:
			lv, ok := live[k].([]any)
			if !ok || len(lv) != len(dv) {
				continue
			}
			out := make([]any, len(dv))
			for i, d := range dv {
				dm, ok1 := d.(map[string]any)
				lm, ok2 := lv[i].(map[string]any)
				if !ok1 || !ok2 {
					out[i] = d
					continue
				}
				m := make(map[string]any, len(lm)+len(dm))
				for k, v := range lm {
					m[k] = v
				}
				for k, v := range dm {
					m[k] = v
				}
				keepItemDefaults(m, lm, dm)
				out[i] = m
			}
			desired[k] = out
		}
	}
}

func isListEntry(pe fieldpath.PathElement) bool {
	return pe.Key != nil || pe.Value != nil || pe.Index != nil
}

// declaresEntries reports whether owned holds an entry of the list at path.
func declaresEntries(owned *fieldpath.Set, path fieldpath.Path) bool {
	s := owned
	for _, pe := range path {
		s = s.WithPrefix(pe)
		if s.Empty() {
			return false
		}
	}
	found := false
	s.Members.Iterate(func(pe fieldpath.PathElement) { found = found || isListEntry(pe) })
	s.Children.Iterate(func(pe fieldpath.PathElement) { found = found || isListEntry(pe) })
	return found
}

// Unions of the Kubernetes API that the schema does not declare as such:
// fields of one object of which at most one may be set. A drift that sets
// another member than the declared one is undone by removing it; merged
// beside the declared member, the API server would refuse the object.
var oneOf = [][]string{
	{"value", "valueFrom"}, // EnvVar
	{"configMapKeyRef", "secretKeyRef", "fieldRef", "resourceFieldRef", "fileKeyRef"}, // EnvVarSource
	{"configMapRef", "secretRef"},                     // EnvFromSource
	{"exec", "httpGet", "tcpSocket", "grpc", "sleep"}, // probes and lifecycle handlers
	// Volume and VolumeProjection sources.
	{"awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
		"emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
		"hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
		"projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
		"serviceAccountToken", "clusterTrustBundle", "podCertificate"},
}

// discriminated are unions whose "type" says which member may be set:
// Deployment, DaemonSet and StatefulSet update strategies.
var discriminated = map[string]map[string]string{
	"strategy":       {"RollingUpdate": "rollingUpdate"},
	"updateStrategy": {"RollingUpdate": "rollingUpdate"},
}

// keepDeclaredMembers removes from desired, wherever the declaration sets a
// member of a union, the union's other members.
func keepDeclaredMembers(desired, declared map[string]any) {
	for _, group := range oneOf {
		var set []string
		for _, f := range group {
			if _, ok := declared[f]; ok {
				set = append(set, f)
			}
		}
		if len(set) == 0 {
			continue
		}
		for _, f := range group {
			if _, ok := declared[f]; !ok {
				delete(desired, f)
			}
		}
	}
	for k, dv := range declared {
		switch dv := dv.(type) {
		case map[string]any:
			sub, ok := desired[k].(map[string]any)
			if !ok {
				continue
			}
			if members, ok := discriminated[k]; ok {
				if t, ok := dv["type"].(string); ok {
					for _, m := range members {
						if members[t] != m {
							if _, declaredToo := dv[m]; !declaredToo {
								delete(sub, m)
							}
						}
					}
				}
			}
			keepDeclaredMembers(sub, dv)
		case []any:
			keepDeclaredEntries(desired[k], dv)
		}
	}
}

// keepDeclaredEntries applies keepDeclaredMembers to the entries of a
// desired list that stand for declared ones: by name where entries have
// one (containers, volumes, env), else by position.
func keepDeclaredEntries(desired any, declared []any) {
	list, ok := desired.([]any)
	if !ok {
		return
	}
	for i, d := range declared {
		dm, ok := d.(map[string]any)
		if !ok {
			continue
		}
		var target map[string]any
		if name, ok := dm["name"].(string); ok {
			target = entryNamed(list, name)
		} else if i < len(list) {
			target, _ = list[i].(map[string]any)
		}
		if target != nil {
			keepDeclaredMembers(target, dm)
		}
	}
}

// entryNamed returns the entry of list whose name is name, if any. Lists
// with named entries are short; a map per list and event would cost more.
func entryNamed(list []any, name string) map[string]any {
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// mergePatch is a request body that moves a live object to its desired state.
type mergePatch struct {
	Type types.PatchType
	Data []byte
}

// computePatch returns the JSON merge patch that turns live into desired,
// or nil if live already is desired, so that no request is sent for
// nothing. A list that differs is sent whole, as desired has it: unlike a
// strategic merge patch, which matches list entries by one merge key, a
// whole list cannot land on the wrong entry.
func computePatch(live, desired map[string]any) (*mergePatch, error) {
	if reflect.DeepEqual(live, desired) {
		return nil, nil
	}
	liveJSON, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	desiredJSON, err := json.Marshal(desired)
	if err != nil {
		return nil, err
	}
	data, err := jsonpatch.CreateMergePatch(liveJSON, desiredJSON)
	if err != nil {
		return nil, fmt.Errorf("computing JSON merge patch: %w", err)
	}
	return &mergePatch{Type: types.MergePatchType, Data: data}, nil
}

// canonicalize puts obj's declaration in the form the API server stores it,
// by a dry run of patch, the correction of live: the declared fields are
// taken from what the server would store. That covers what the API types'
// round trip (see storedForm) cannot know: values the server defaults
// inside atomic lists and structs (a fieldRef's apiVersion, a
// NetworkPolicy port's protocol) and those of custom resources, whose
// CRDs default them. It is done once per declaration, on a mismatch at
// the first check or after the engine's own write, where it is most
// likely the server's form rather than drift; a mismatch that is drift is
// taken in stored form all the same, since the dry run applies the
// declaration over it.
//
// refused is the API server's refusal of the dry run as the set's writer:
// the correction would get it too. A writer that may not write the object
// at all (a namespaced ServiceAccount, a cluster-scoped webhook
// configuration) still needs its stored form, or a value the server
// defaults inside an atomic list (a webhook rule's scope) is drift it
// could never correct: the dry run is then made again as the engine,
// which writes nothing, and whose stored form is the same.
func (e *Engine) canonicalize(ctx context.Context, spec ObjectSet, obj *lockedObject, rules mergeRules, declared *unstructured.Unstructured, patch *mergePatch) (canon *unstructured.Unstructured, refused, err error) {
	opts := metav1.PatchOptions{FieldManager: e.fieldManager, DryRun: []string{metav1.DryRunAll}}
	out, err := e.writer(spec, obj.ref()).Patch(ctx, obj.ref().Name, patch.Type, patch.Data, opts)
	if apierrors.IsForbidden(err) && spec.Writer != nil {
		refused = err
		out, err = e.resource(obj.ref()).Patch(ctx, obj.ref().Name, patch.Type, patch.Data, opts)
	}
	if err != nil {
		if refused == nil && permanentReason(err) != "" {
			refused = err
		}
		return nil, refused, err
	}
	canon, err = obj.storedDeclaration(rules, declared, out)
	return canon, refused, err
}

// declaredIn returns the fields declared sets, as out has them: by the
// schema, a map list's declared entries with their keys, an atomic list or
// map whole.
func (r mergeRules) declaredIn(declared, out map[string]any) (map[string]any, error) {
	if r.types != deducedTypes {
		dt, err1 := r.types.ObjectToTyped(&unstructured.Unstructured{Object: declared}, typed.AllowDuplicates)
		st, err2 := r.types.ObjectToTyped(&unstructured.Unstructured{Object: out}, typed.AllowDuplicates)
		if err1 == nil && err2 == nil {
			fields, err := dt.ToFieldSet()
			if err != nil {
				return nil, err
			}
			if m, ok := st.ExtractItems(fields, typed.WithAppendKeyFields()).AsValue().Unstructured().(map[string]any); ok {
				return m, nil
			}
		}
	}
	// Values of the deduced rules do not extract: structured-merge-diff
	// gives their maps back empty. By those rules maps are granular and
	// lists atomic, which is simple to do by hand.
	return declaredByShape(declared, out), nil
}

// declaredByShape returns the keys of declared as out has them, maps key
// by key and anything else whole.
func declaredByShape(declared, out map[string]any) map[string]any {
	m := make(map[string]any, len(declared))
	for k, dv := range declared {
		ov, ok := out[k]
		if !ok {
			continue
		}
		dm, ok1 := dv.(map[string]any)
		om, ok2 := ov.(map[string]any)
		if ok1 && ok2 {
			m[k] = declaredByShape(dm, om)
		} else {
			m[k] = ov
		}
	}
	return m
}

// storedDeclaration takes the declared fields from out, a dry run's answer,
// records them as obj's declaration and returns them.
func (obj *lockedObject) storedDeclaration(rules mergeRules, declared, out *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj.canonical = true
	m, err := rules.declaredIn(declared.Object, out.Object)
	if err != nil {
		return nil, err
	}
	canon := &unstructured.Unstructured{Object: m}
	// What the dry run does not say back as declared, such as a field
	// the server does not store, stays declared: holding it costs a
	// no-op patch at most, and dropping it could lose a value.
	keepUnsaid(canon.Object, declared.Object)
	data, err := packKept(canon)
	if err != nil {
		return nil, err
	}
	obj.declared.Store(data)
	return canon, nil
}

// keepUnsaid adds to stored the non-zero fields of declared it lacks.
func keepUnsaid(stored, declared map[string]any) {
	for k, dv := range declared {
		sv, ok := stored[k]
		if !ok {
			if !isZero(dv) {
				stored[k] = dv
			}
			continue
		}
		switch dv := dv.(type) {
		case map[string]any:
			if sm, ok := sv.(map[string]any); ok {
				keepUnsaid(sm, dv)
			}
		case []any:
			if sl, ok := sv.([]any); ok && len(sl) == len(dv) {
				for i := range dv {
					dm, ok1 := dv[i].(map[string]any)
					sm, ok2 := sl[i].(map[string]any)
					if ok1 && ok2 {
						keepUnsaid(sm, dm)
					}
				}
			}
		}
	}
}

// keyed rewrites the list indexes of pointers into the declared object as
// the keys of the entries they point at, where the schema keys the list:
// the same pointer then finds the same entry in a live list of another
// order. /spec/template/spec/containers/0/image names the declared first
// container; with a debug container prepended live, index 0 is another.
func (r mergeRules) keyed(declared map[string]any, pointers []Pointer) []Pointer {
	if len(pointers) == 0 || r.types == deducedTypes {
		return pointers
	}
	tv, err := r.typed(declared)
	if err != nil {
		return pointers
	}
	out := make([]Pointer, len(pointers))
	for i, p := range pointers {
		out[i] = keyedPointer(tv.Schema(), tv.TypeRef(), declared, p)
	}
	return out
}

// fieldType is the type of m's field name: a declared field's own, else
// that of m's elements.
func fieldType(m *smdschema.Map, name string) smdschema.TypeRef {
	if f, ok := m.FindField(name); ok {
		return f.Type
	}
	return m.ElementType
}

func keyedPointer(s *smdschema.Schema, tr smdschema.TypeRef, doc any, p Pointer) Pointer {
	out := make(Pointer, 0, len(p))
	for n, seg := range p {
		atom, ok := s.Resolve(tr)
		if !ok {
			return append(out, p[n:]...)
		}
		switch {
		case atom.Map != nil:
			m, _ := doc.(map[string]any)
			tr = fieldType(atom.Map, seg)
			doc = m[seg]
			out = append(out, seg)
		case atom.List != nil:
			list, _ := doc.([]any)
			i := index(list, seg)
			if i < 0 {
				return append(out, p[n:]...)
			}
			entry, _ := list[i].(map[string]any)
			if atom.List.ElementRelationship == smdschema.Associative && len(atom.List.Keys) > 0 && entry != nil {
				if keyed, ok := keyedSegment(entry, atom.List.Keys); ok {
					seg = keyed
				}
			}
			out = append(out, seg)
			tr = atom.List.ElementType
			doc = list[i]
		default:
			return append(out, p[n:]...)
		}
	}
	return out
}

package engine

import (
	"cmp"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Judgement is the engine's answer to a request that would write an object:
// whether a set that prevents changes (see ObjectSet.Prevent) holds it, and
// what of its declaration the request would undo.
type Judgement struct {
	// Key is the set that holds the object and prevents changes to it;
	// empty when none does, and the request goes through.
	Key  string
	Ref  ObjectRef
	Kind string
	// Deleted says the request deletes the object.
	Deleted bool
	// Fields are the declared fields the request would change, each
	// with its declared value.
	Fields []DeniedField
}

// DeniedField is a declared field a request would change.
type DeniedField struct {
	// Path is a JSON pointer, named as Drift.Paths are.
	Path string
	// Declared is the declared value; nil if the request adds the field
	// where the declaration removes it (a map list entry, say), or if it
	// is Redacted.
	Declared any
	// Redacted says the field is a Secret's data, whose declared value is
	// left out: a denial is shown to whoever sent the request, and RBAC
	// lets someone patch a Secret they may not read (see secretData).
	Redacted bool
}

// Denied reports whether the request would change what the set holds.
func (j Judgement) Denied() bool { return j.Key != "" && (j.Deleted || len(j.Fields) > 0) }

// Judge says whether a request to write an object, or to delete it (obj
// nil), would drift it from what a set that prevents changes holds: its
// declaration, or while the object is not verified the last verified one
// (see Verification.Fallback). old is the object before the request, nil
// for a creation.
//
// It uses the revert's comparison on the request's object: a field is
// denied exactly when the revert would correct it, so a value the API
// server normalizes, an ignored path, an added label or a status write
// never is. A field the request leaves as old had it is not denied either,
// though it may differ from the declaration: the request did not make that
// drift, and it may be a declaration the API server stores in another form.
// Judge reads only what the engine holds in memory.
func (e *Engine) Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (Judgement, error) {
	target := obj
	if target == nil {
		target = old
	}
	if target == nil {
		return Judgement{}, nil
	}
	ref := ObjectRef{GVR: gvr, Namespace: target.GetNamespace(), Name: target.GetName()}
	key, locked := e.prevented(ref)
	if locked == nil {
		return Judgement{}, nil
	}
	declared, err := locked.held()
	if err != nil || declared == nil {
		return Judgement{}, err
	}
	j := Judgement{Key: key, Ref: ref, Kind: kindOf(declared)}
	if obj == nil {
		j.Deleted = true
		return j, nil
	}
	rules := e.schemas.rules(gvr.GroupVersion())
	if rules.holds(obj.Object, declared.Object) {
		return Judgement{}, nil
	}
	desired, err := locked.desired(rules, obj.Object, declared.Object)
	if err != nil {
		return Judgement{}, err
	}
	if patch, err := computePatch(obj.Object, desired); err != nil || patch == nil {
		return Judgement{}, err
	}
	for _, text := range rules.kindOf(desired).driftPaths(obj.Object, desired) {
		p, err := ParsePointer(text)
		if err != nil {
			return Judgement{}, err
		}
		if old != nil && samePath(p, old.Object, obj.Object) {
			continue
		}
		if secretData(gvr, p) {
			j.Fields = append(j.Fields, DeniedField{Path: text, Redacted: true})
			continue
		}
		value, _ := p.get(desired)
		j.Fields = append(j.Fields, DeniedField{Path: text, Declared: value})
	}
	if len(j.Fields) == 0 {
		return Judgement{}, nil
	}
	return j, nil
}

// JudgeScale says whether a request to the scale subresource of an object,
// setting replicas, would drift it from what a set that prevents changes
// declares where the type keeps its replicas: /spec/replicas for built-in
// kinds, a CRD's specReplicasPath for a custom resource (see scalePaths).
// The request carries an autoscaling Scale, not the object, so the one
// field it can change is compared by hand.
func (e *Engine) JudgeScale(gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (Judgement, error) {
	ref := ObjectRef{GVR: gvr, Namespace: namespace, Name: name}
	key, locked := e.prevented(ref)
	if locked == nil || oldReplicas == replicas {
		return Judgement{}, nil
	}
	path, known := e.scales.path(gvr)
	if !known {
		// Not knowing is no reason to deny: the revert follows.
		return Judgement{}, nil
	}
	declared, err := locked.held()
	if err != nil || declared == nil {
		return Judgement{}, err
	}
	value, ok := path.get(declared.Object)
	if !ok || slices.ContainsFunc(locked.ignored(), func(p Pointer) bool { return len(p) <= len(path) && slices.Equal(p, path[:len(p)]) }) || scalarEqual(value, replicas) {
		return Judgement{}, nil
	}
	return Judgement{Key: key, Ref: ref, Kind: kindOf(declared), Fields: []DeniedField{{Path: path.String(), Declared: value}}}, nil
}

// secretData reports whether p is, or lies under, a Secret's data or
// stringData, whose values a Judgement never carries. The API server lets
// patch and read be granted apart, and a denial is written back to the
// requester: printing the declared value would show a locked Secret's
// content to someone who may change it but not read it. Its key names
// are no secret (`kubectl describe` shows them).
func secretData(gvr schema.GroupVersionResource, p Pointer) bool {
	return gvr.Group == "" && gvr.Resource == "secrets" && len(p) > 0 && (p[0] == "data" || p[0] == "stringData")
}

// prevented returns the set that holds ref and prevents changes to it, and
// its object; nil if there is none. A paused set prevents nothing: its
// owner is changing the objects (see Pause).
func (e *Engine) prevented(ref ObjectRef) (string, *lockedObject) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := e.holderLocked(ref)
	s := e.activeLocked(key)
	if s == nil || !s.spec.Prevent || s.spec.ReportOnly {
		return "", nil
	}
	return key, s.objects.get(ref)
}

// PreventedTypes lists the resource types of the objects held by sets that
// prevent changes, for an admission webhook's rules. Paused sets count (see
// Pause).
func (e *Engine) PreventedTypes() []schema.GroupVersionResource {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[schema.GroupVersionResource]bool{}
	for _, s := range e.sets {
		if !s.spec.Prevent || s.spec.ReportOnly {
			continue
		}
		for gvr := range s.gvrs {
			seen[gvr] = true
		}
	}
	out := make([]schema.GroupVersionResource, 0, len(seen))
	for gvr := range seen {
		out = append(out, gvr)
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionResource) int { return cmp.Compare(a.String(), b.String()) })
	return out
}

// samePath reports whether p has the same value, or the same absence, in a
// and b.
func samePath(p Pointer, a, b map[string]any) bool {
	va, inA := p.get(a)
	vb, inB := p.get(b)
	return inA == inB && reflect.DeepEqual(va, vb)
}

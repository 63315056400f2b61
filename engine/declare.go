package engine

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Declare makes set the objects held under key, replacing what key held
// before, and ends a pause (see Pause). Objects that are no longer declared
// are left as they are. Every object is checked by the next Sync.
func (e *Engine) Declare(key string, set ObjectSet) {
	s := &objectSet{
		key:        key,
		spec:       set,
		since:      unixNano(set.Since),
		namespaces: map[string]bool{},
		kinds:      map[schema.GroupKind]bool{},
		dirty:      map[ObjectRef]int64{},
		gvrs:       map[schema.GroupVersionResource]int{},
	}
	for _, obj := range set.Objects {
		s.unresolved = append(s.unresolved, &unresolvedObject{obj: obj})
		switch obj.GroupVersionKind().GroupKind() {
		case namespaceKind:
			s.namespaces[obj.GetName()] = true
		case crdKind:
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
			s.kinds[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	// Resolved objects are kept normalized (see resolve); the caller's
	// copies are not held on to.
	s.spec.Objects = nil
	resolved := e.resolveKnown(s.unresolved, s.spec)
	e.mu.Lock()
	old := e.sets[key]
	switch {
	case old != nil:
		s.seq = old.seq
		if s.since == 0 {
			s.since = old.since
		}
	default:
		e.declared++
		s.seq = e.declared
		if s.since == 0 {
			s.since = e.now().UnixNano()
		}
	}
	e.sets[key] = s
	var released []ObjectRef
	if old != nil {
		released = e.disownLocked(key, old)
	}
	acquire, notify := e.resolveLocked(key, s, old, resolved)
	notify = append(notify, e.handOffLocked(released)...)
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}
	if old != nil {
		e.releaseInformers(old)
	}
	e.notifyAll(notify)
}

var (
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	crdKind       = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// Prepare reads the merge rules of every declared set's kinds and resolves
// the objects waiting for them (see Sync), acquiring their informers. Called
// once the sets known at startup are declared and before Run, it lets each
// informer's first list find all of its objects tracked: the first Sync of
// every set then reads them from the cache, not with one GET each. Called
// also as they are declared, every few hundred objects, it keeps the
// caller's declarations (ObjectSet.Objects, whole) from being held all at
// once: resolved, an object is kept packed, in a fraction of the bytes.
// Rules already read are not read again.
func (e *Engine) Prepare(ctx context.Context) {
	e.mu.Lock()
	var gvs []schema.GroupVersion
	for _, s := range e.sets {
		for _, gv := range s.groupVersions() {
			if !slices.Contains(gvs, gv) {
				gvs = append(gvs, gv)
			}
		}
	}
	e.mu.Unlock()
	e.schemas.load(ctx, gvs)
	resolved := e.resolveAll()
	e.mu.Lock()
	var acquire []schema.GroupVersionResource
	var notify []string
	for key, s := range e.sets {
		a, n := e.resolveLocked(key, s, nil, resolved)
		acquire, notify = append(acquire, a...), append(notify, n...)
	}
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}
	e.notifyAll(notify)
}

// Forget stops holding key's objects and leaves them as they are.
func (e *Engine) Forget(key string) {
	e.mu.Lock()
	s := e.sets[key]
	if s == nil {
		e.mu.Unlock()
		return
	}
	delete(e.sets, key)
	notify := e.handOffLocked(e.disownLocked(key, s))
	e.mu.Unlock()
	e.releaseInformers(s)
	e.notifyAll(notify)
}

// notifyAll calls notify with each key, without e.mu held.
func (e *Engine) notifyAll(keys []string) {
	slices.Sort(keys)
	for _, key := range slices.Compact(keys) {
		e.notify(key)
	}
}

// releaseInformers releases s's informers. It must be called without e.mu
// held: Release waits for the informer to stop, and the informer's handler
// takes e.mu.
func (e *Engine) releaseInformers(s *objectSet) {
	for gvr, n := range s.gvrs {
		for range n {
			e.informers.Release(gvr)
		}
	}
}

// unixNano is t in Unix nanoseconds, and 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

package engine

import (
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/informers"
)

// onEvent marks the object dirty in the set that holds it.
func (e *Engine) onEvent(gvr schema.GroupVersionResource, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ref := ObjectRef{GVR: gvr, Namespace: m.GetNamespace(), Name: m.GetName()}
	e.watches.changed(gvr, ref.Namespace, ref.Name)
	now := e.now().UnixNano()
	e.mu.Lock()
	key := e.holderLocked(ref)
	// A paused holder checks nothing until it is declared again, which
	// checks every object; the next set in line waits for it.
	s := e.activeLocked(key)
	if s != nil {
		if _, ok := s.dirty[ref]; !ok {
			s.dirty[ref] = now
		}
	}
	e.mu.Unlock()
	if key != "" {
		e.listings.forget(ref)
	}
	if s != nil {
		e.notify(key)
	}
}

// inLineStub stands in the informer cache for a locked object that was as
// declared when it was stored, checked against the declaration with the
// given generation. Most locked objects are in line most of the time, so
// the cache holds little more than a name for them; an object that drifts
// is stored whole until it is back in line.
type inLineStub struct {
	// The Stub is kept by value: one allocation per object, not two.
	informers.Stub
	generation uint64
	// readsStatus marks a Job that its TTL deletes once it finishes: its
	// status tells when (see finishedWithTTL).
	readsStatus bool
}

// ReadsStatus tells the informers that a status-only change matters.
func (s *inLineStub) ReadsStatus() bool { return s.readsStatus }

// store decides what the informer cache keeps of a tracked object: an
// inLineStub when it is as declared for the set that holds it, else the
// whole object: its managedFields name who made the drift.
func (e *Engine) store(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) metav1.Object {
	ref := ObjectRef{GVR: gvr, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	e.mu.Lock()
	var locked *lockedObject
	var spec ObjectSet
	if locked = e.owners.holder(ref); locked != nil {
		spec = locked.set.spec
		locked.setFlag(flagFinished, finishedWithTTL(obj))
	}
	e.mu.Unlock()
	if locked != nil && !(spec.ApplyManager != "" && hasUpdateEntry(obj, e.fieldManager)) {
		if declared, err := locked.declaration(); err == nil && locked.inLineBy(e.schemas.rules(gvr.GroupVersion()), obj.Object, declared.Object) {
			return &inLineStub{Stub: *informers.NewStub(obj), generation: locked.generation, readsStatus: waitsToFinish(obj)}
		}
	}
	return obj
}

// waitsToFinish reports whether obj is a Job that its TTL deletes once it
// finishes, and that has not finished yet.
func waitsToFinish(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "batch", Kind: "Job"}) {
		return false
	}
	_, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "ttlSecondsAfterFinished")
	return ok && !finishedWithTTL(obj)
}

// finishedWithTTL reports whether obj is a Job that has finished and that
// the TTL-after-finished controller deletes: recreating it would run it
// again, every time the TTL runs out.
func finishedWithTTL(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "batch", Kind: "Job"}) {
		return false
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "ttlSecondsAfterFinished"); !ok {
		return false
	}
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True" {
			return true
		}
	}
	return false
}

// tracked tells the informers which objects to keep in full.
func (e *Engine) tracked(gvr schema.GroupVersionResource, namespace, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owners.has(ObjectRef{GVR: gvr, Namespace: namespace, Name: name})
}

// readsManagedFields tells the informers whether store reads an object's
// managedFields: only for a set that an Apply manager writes (see
// hasUpdateEntry), and for one not yet declared, to be safe.
func (e *Engine) readsManagedFields(gvr schema.GroupVersionResource, namespace, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.owners.holder(ObjectRef{GVR: gvr, Namespace: namespace, Name: name})
	return o == nil || o.set.spec.ApplyManager != ""
}

// heldMetadata names the labels and annotations the set that holds an
// object declares of it: a change to any other one is not drift, since
// the merge keeps what the declaration does not say. An object still to
// be verified may be held as its fallback has it, so all of its are held.
func (e *Engine) heldMetadata(gvr schema.GroupVersionResource, namespace, name string) *informers.HeldMetadata {
	ref := ObjectRef{GVR: gvr, Namespace: namespace, Name: name}
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.owners.holder(ref)
	if o == nil || o.flag(flagUnproved) {
		return nil
	}
	return o.metadata
}

// maxHeldKeys bounds Engine.heldKeys. The objects of one chart share a
// handful of key sets; past this, sharing starts again from nothing.
const maxHeldKeys = 4096

// internHeld returns the HeldMetadata of declared's labels and
// annotations, shared with every object that holds the same keys. For
// keys it has seen, it allocates nothing.
func (e *Engine) internHeld(declared *unstructured.Unstructured) *informers.HeldMetadata {
	var labels, annotations [32]string
	l, a := sortedKeys(declared, "labels", labels[:0]), sortedKeys(declared, "annotations", annotations[:0])
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	buf := e.heldBuf[:0]
	for _, k := range l {
		buf = append(append(buf, k...), 0)
	}
	buf = append(buf, 0xff)
	for _, k := range a {
		buf = append(append(buf, k...), 0)
	}
	e.heldBuf = buf
	if p := e.heldKeys[string(buf)]; p != nil {
		return p
	}
	if e.heldKeys == nil || len(e.heldKeys) >= maxHeldKeys {
		e.heldKeys = map[string]*informers.HeldMetadata{}
	}
	held := informers.NewHeldMetadata(l, a)
	e.heldKeys[string(buf)] = &held
	return &held
}

// sortedKeys appends the keys of declared's metadata field to keys, sorted.
func sortedKeys(declared *unstructured.Unstructured, field string, keys []string) []string {
	m, _, _ := unstructured.NestedFieldNoCopy(declared.Object, "metadata", field)
	held, _ := m.(map[string]any)
	for k := range held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// typesChanged runs when a CRD changes: the RESTMapper forgets what it
// knew, and sets with objects of unknown kinds, or objects still to be
// brought in line, try again. A custom resource whose CRD was deleted and
// is being recreated fails to be created until the CRD is Established, an
// event of its own; without it, the set would wait out the caller's
// backoff.
func (e *Engine) typesChanged() {
	e.mapper.Reset()
	e.schemas.forget()
	e.mu.Lock()
	var keys []string
	for key, s := range e.sets {
		if !s.paused && (len(s.unresolved) > 0 || len(s.dirty) > 0) {
			keys = append(keys, key)
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		e.notify(key)
	}
	if e.opts.OnTypesChanged != nil {
		e.opts.OnTypesChanged()
	}
}

// seenCRD takes what the CRD watch sees of a CRD, before the change is
// told to typesChanged: its scale subresources and whether it is being
// deleted.
func (e *Engine) seenCRD(crd *unstructured.Unstructured) {
	e.scales.seen(crd)
	e.deletedCRDs.seen(crd)
}

// healthChanged runs when gvr's informer stops or starts seeing its objects
// as they are now: every set with objects of that type syncs, to say so
// (see Result.Unwatched) and to check what waited for the watch. Once it
// sees them again, every object of the type is checked: an informer
// started anew, as after its CRD was deleted and recreated, lists what is
// there and reports no deletion it missed while it was stopped.
func (e *Engine) healthChanged(gvr schema.GroupVersionResource, current bool) {
	now := e.now().UnixNano()
	e.mu.Lock()
	var keys []string
	for key, s := range e.sets {
		if s.gvrs[gvr] == 0 || s.paused {
			continue
		}
		keys = append(keys, key)
		if !current {
			continue
		}
		for _, o := range s.objects {
			if _, ok := s.dirty[o.ref()]; !ok && o.ref().GVR == gvr {
				s.dirty[o.ref()] = now
			}
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		e.notify(key)
	}
}

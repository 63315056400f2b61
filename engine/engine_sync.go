package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
)

// Result says where a set stands after a Sync.
type Result struct {
	// Objects is the number of declared objects.
	Objects int
	// InLine is true when every declared object has been checked and is
	// as declared, as far as the engine has seen. It is what a caller may
	// report as "locked".
	InLine bool
	// Corrected and Created list the objects this Sync patched or
	// recreated.
	Corrected []ObjectRef
	Created   []ObjectRef
	// Unresolved lists declared objects whose kind the API server does not
	// serve yet (see TypeError).
	Unresolved []error
}

// Sync checks every dirty object of key's set and corrects those that are
// not as declared. It returns the errors of the objects it could not check
// or correct, joined; those objects stay dirty for the next Sync. A key that
// holds no set syncs to an empty Result.
func (e *Engine) Sync(ctx context.Context, key string) (Result, error) {
	e.mu.Lock()
	s := e.sets[key]
	if s == nil {
		e.mu.Unlock()
		return Result{}, nil
	}
	acquire := e.resolveLocked(key, s)
	var todo []*lockedObject
	for ref := range s.dirty {
		todo = append(todo, s.objects[ref])
	}
	clear(s.dirty)
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}

	// Reading a type's objects from its informer beats a GET per object,
	// so a type whose informer is still listing (it was just acquired) is
	// waited for, briefly: past that, or for a type not served, objects
	// are read one by one.
	waited := map[schema.GroupVersionResource]bool{}
	for _, obj := range todo {
		if gvr := obj.ref.GVR; !waited[gvr] {
			waited[gvr] = true
			wctx, cancel := context.WithTimeout(ctx, informerSyncWait)
			e.informers.WaitForSync(wctx, gvr)
			cancel()
		}
	}

	var res Result
	var errs []error
	for _, obj := range todo {
		action, err := e.syncObject(ctx, s.spec, obj)
		switch {
		case err != nil:
			errs = append(errs, &ObjectError{Ref: obj.ref, Err: err})
		case action == actionPatched:
			res.Corrected = append(res.Corrected, obj.ref)
		case action == actionCreated:
			res.Created = append(res.Created, obj.ref)
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, obj := range todo {
		if !obj.inLine {
			s.dirty[obj.ref] = struct{}{}
		}
	}
	res.Objects = len(s.objects) + len(s.unresolved)
	res.InLine = len(s.unresolved) == 0
	for _, obj := range s.objects {
		if !obj.inLine {
			res.InLine = false
		}
	}
	for _, u := range s.unresolved {
		res.Unresolved = append(res.Unresolved, u.err)
	}
	return res, errors.Join(errs...)
}

// informerSyncWait bounds how long Sync waits for a new informer's first
// list before reading objects one by one.
const informerSyncWait = 5 * time.Second

type action int

const (
	actionNone action = iota
	actionPatched
	actionCreated
)

// syncObject brings one object in line. obj.inLine says whether it is
// afterwards; only the goroutine syncing obj's set writes it.
func (e *Engine) syncObject(ctx context.Context, spec ObjectSet, obj *lockedObject) (action, error) {
	obj.inLine = false
	live, inLine, err := e.live(ctx, obj)
	if inLine {
		obj.inLine = true
		return actionNone, nil
	}
	if apierrors.IsNotFound(err) {
		return actionCreated, e.create(ctx, spec, obj)
	}
	if err != nil {
		return actionNone, err
	}
	if rv := live.GetResourceVersion(); rv != "" && slices.Contains(obj.superseded, rv) {
		obj.inLine = true
		return actionNone, nil
	}
	declared, err := obj.declaration()
	if err != nil {
		return actionNone, err
	}
	desired := Desired(live.Object, declared.Object, obj.meta)
	patch, err := ComputePatch(live.Object, desired, obj.meta)
	if err != nil {
		return actionNone, err
	}
	if patch != nil && obj.noop != nil && obj.noop.resourceVersion == live.GetResourceVersion() && obj.noop.data == string(patch.Data) {
		patch = nil
	}
	if patch == nil {
		if err := e.handOver(ctx, spec, obj, live); err != nil {
			return actionNone, err
		}
		obj.inLine = true
		return actionNone, nil
	}
	if spec.BeforeWrite != nil {
		if err := spec.BeforeWrite(ctx, obj.ref, live); err != nil {
			return actionNone, err
		}
	}
	out, err := e.resource(obj.ref).Patch(ctx, obj.ref.Name, patch.Type, patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager})
	if err != nil {
		return actionNone, fmt.Errorf("patching: %w", err)
	}
	if rv := live.GetResourceVersion(); rv != "" && out.GetResourceVersion() == rv {
		obj.noop = &noopPatch{resourceVersion: live.GetResourceVersion(), data: string(patch.Data)}
	}
	obj.superseded = []string{live.GetResourceVersion()}
	if err := e.handOver(ctx, spec, obj, out); err != nil {
		return actionPatched, err
	}
	obj.inLine = true
	return actionPatched, nil
}

// create recreates a deleted object from its declaration. For a set owned
// by a server-side-apply manager it applies as that manager, so that the
// owner's next apply finds every field its own.
func (e *Engine) create(ctx context.Context, spec ObjectSet, obj *lockedObject) error {
	if spec.BeforeWrite != nil {
		if err := spec.BeforeWrite(ctx, obj.ref, nil); err != nil {
			return err
		}
	}
	declared, err := obj.declaration()
	if err != nil {
		return err
	}
	if spec.ServerSideApply {
		_, err = e.resource(obj.ref).Apply(ctx, obj.ref.Name, declared, metav1.ApplyOptions{FieldManager: obj.applyManagerOrDefault(), Force: true})
	} else {
		_, err = e.resource(obj.ref).Create(ctx, declared, metav1.CreateOptions{FieldManager: e.fieldManager})
	}
	if err != nil {
		// AlreadyExists means the cache was behind; the event that
		// brings it up to date marks the object dirty again.
		return fmt.Errorf("recreating: %w", err)
	}
	obj.inLine = true
	return nil
}

// handOver moves ownership of the fields the engine wrote to the set's
// server-side-apply manager, with a JSON patch of managedFields alone (see
// ObjectSet.ServerSideApply). The patch carries the resourceVersion, so it
// fails rather than overwrite a concurrent change; the event of that change
// brings the object back to Sync.
func (e *Engine) handOver(ctx context.Context, spec ObjectSet, obj *lockedObject, live *unstructured.Unstructured) error {
	if !spec.ServerSideApply {
		return nil
	}
	if m := applyManagerOf(live, e.fieldManager); m != "" {
		obj.applyManager = m
	}
	if !hasUpdateEntry(live, e.fieldManager) {
		return nil
	}
	if trimmed(live) {
		// The cache keeps no field sets (see trimManagedFields); the
		// hand-over needs them.
		full, err := e.resource(obj.ref).Get(ctx, obj.ref.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading managedFields to hand fields over: %w", err)
		}
		live = full
	}
	manager := obj.applyManagerOrDefault()
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(e.fieldManager), manager)
	if err != nil || patch == nil {
		return err
	}
	_, err = e.resource(obj.ref).Patch(ctx, obj.ref.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: e.fieldManager})
	switch {
	case apierrors.IsConflict(err):
		// Someone wrote since live was read; the event of that write
		// brings the object back, and the hand-over is retried then.
		return nil
	case err != nil:
		return fmt.Errorf("handing fields over to field manager %q: %w", manager, err)
	}
	// live is now older than the object the hand-over wrote.
	obj.superseded = append(obj.superseded, live.GetResourceVersion())
	return nil
}

// hasUpdateEntry reports whether manager has an Update entry on obj.
func hasUpdateEntry(obj *unstructured.Unstructured, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationUpdate {
			return true
		}
	}
	return false
}

// trimmed reports whether obj came from the cache with its field sets
// dropped: the API server always sends fieldsV1.
func trimmed(obj *unstructured.Unstructured) bool {
	md, _ := obj.Object["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok && m["fieldsV1"] == nil {
			return true
		}
	}
	return false
}

// applyManagerOf returns the Apply field manager of obj other than own,
// preferring DefaultApplyManager when there are several.
func applyManagerOf(obj *unstructured.Unstructured, own string) string {
	found := ""
	for _, f := range obj.GetManagedFields() {
		if f.Operation != metav1.ManagedFieldsOperationApply || f.Subresource != "" || f.Manager == own {
			continue
		}
		if f.Manager == DefaultApplyManager {
			return f.Manager
		}
		if found == "" {
			found = f.Manager
		}
	}
	return found
}

func (o *lockedObject) applyManagerOrDefault() string {
	if o.applyManager != "" {
		return o.applyManager
	}
	return DefaultApplyManager
}

// live returns the object from the informer cache, or from the API server
// while the cache is not synced, does not hold it, or holds a stale stand-in. inLine is true,
// with no object, when the cache says the object was as declared by obj's
// current declaration when last stored.
func (e *Engine) live(ctx context.Context, obj *lockedObject) (live *unstructured.Unstructured, inLine bool, err error) {
	ref := obj.ref
	cached, exists, synced, err := e.informers.Get(ref.GVR, ref.Namespace, ref.Name)
	// The cache does not hold objects that were untracked at their last
	// event, so a missing object is looked up: it may have been created
	// while no release locked it. A deleted object costs one GET more.
	if err == nil && synced && exists {
		switch c := cached.(type) {
		case *unstructured.Unstructured:
			return c, false, nil
		case *inLineStub:
			if c.generation == obj.generation {
				return nil, true, nil
			}
		}
	}
	live, err = e.resource(ref).Get(ctx, ref.Name, metav1.GetOptions{})
	return live, false, err
}

func (e *Engine) resource(ref ObjectRef) dynamicResource {
	r := e.client.Resource(ref.GVR)
	if ref.Namespace == "" {
		return r
	}
	return r.Namespace(ref.Namespace)
}

package informers

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Handler receives every add, update and delete of an object of a watched
// type. obj is the object as stored (see Options.Tracked); on delete it may
// be a cache.DeletedFinalStateUnknown.
type Handler func(gvr schema.GroupVersionResource, obj any)

// Options configure a Registry.
type Options struct {
	// Handler is called for every event of every running informer.
	Handler Handler
	// Tracked reports whether an object is one a caller needs. The others
	// are not stored at all, so that a cluster-wide informer for, say,
	// Secrets costs nothing per Secret the caller does not lock; their
	// events reach Handler as a *Stub. Nil means every object is tracked.
	Tracked func(gvr schema.GroupVersionResource, namespace, name string) bool
	// Store, if set, decides what the cache keeps of a tracked object: the
	// object itself, trimmed, or a smaller stand-in of the caller's own
	// (a bare *Stub means untracked, and is not stored). obj may come
	// without its managedFields (see ReadsManagedFields), which are put
	// back only into obj itself.
	Store func(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) metav1.Object
	// HeldMetadata, if set, names the labels and annotations the caller
	// holds of a tracked object that Store keeps as a stand-in: a change
	// to any other label or annotation alone is then skipped, as a
	// change to its status is. Nil holds them all. It must name every key
	// Store's judgement reads, and be quick: it is called from watch
	// goroutines for every event of a tracked object. What it returns is
	// not changed afterwards, so callers may share one among objects.
	HeldMetadata func(gvr schema.GroupVersionResource, namespace, name string) *HeldMetadata
	// ReadsManagedFields, if set, reports whether Store reads the
	// metadata.managedFields of the tracked object namespace/name. For
	// the others, decoded from a watch (with Config set), Store gets the
	// object without them, and they are put back only if it keeps the
	// object itself: they are a tree of small maps for each manager that
	// wrote the object, often half of its decoding, and most tracked
	// objects are stored as stand-ins. Nil: Store always gets them. It
	// must be quick, as HeldMetadata.
	ReadsManagedFields func(gvr schema.GroupVersionResource, namespace, name string) bool
	// OnTypesChanged is called when a CustomResourceDefinition is created,
	// changed or deleted, so that callers can refresh their RESTMapper and
	// retry kinds that did not exist before.
	OnTypesChanged func()
	// OnCRD, if set, is called from the CRD watch with each
	// CustomResourceDefinition whole, as it is listed or changes (its
	// deletion included), before the watch trims it to its name: for a
	// caller that keeps a little of what a CRD says, such as the replicas
	// path of its scale subresource. It must be quick. A deletion is not
	// told apart: the trimmed deletion event can reach the handlers after
	// the same CRD was created again, so a caller keeps the last CRD seen.
	OnCRD func(crd *unstructured.Unstructured)
	// Readiness, if set, is what lists and watches that failed because
	// the API server was unavailable wait on (see Guard). Nil, with
	// Config set, asks Config's API server (see Probe); nil without
	// Config leaves client-side backoff alone.
	Readiness Readiness
	// OnHealthChanged, if set, is called when a type's informer stops
	// or starts seeing its objects as they are now (see Health). It runs
	// on the informer's goroutine and must not block.
	OnHealthChanged func(gvr schema.GroupVersionResource, current bool)
	// Config, if set, is what the informers watch with instead of the
	// dynamic client. Objects that Tracked says no caller needs are then
	// read only as far as their name and resourceVersion, never decoded:
	// at cold start on a cluster of mostly untracked objects, decoding
	// them is most of what the informers cost.
	Config *rest.Config
}

// Registry runs one dynamic informer per resource type (GVR), on demand.
// Callers Acquire a type while they need it and Release it when done; the
// informer starts with the first Acquire and stops with the last Release.
// Informers of types whose CRD is deleted stop, and start again when the CRD
// comes back.
type Registry struct {
	client  dynamic.Interface
	opts    Options
	watches *watchClient // set by Run when Options.Config is

	mu      sync.Mutex
	entries map[schema.GroupVersionResource]*entry
	ctx     context.Context // nil until Run starts, and after it stops
	wg      sync.WaitGroup  // every running informer goroutine
	// holds counts the Holds not yet released: while there is one, no
	// informer starts.
	holds int
}

// entry is one type's informer. refs counts Acquires; cancel and done are set
// while the informer runs.
type entry struct {
	gvr    schema.GroupVersionResource
	refs   int
	store  *trackingStore
	health *Health
	cancel context.CancelFunc
	done   chan struct{}
	// missing is set when the API server says the type does not exist; the
	// informer is stopped until a CRD change says to try again.
	missing bool
	// scanned counts the objects Scans of the type read since its
	// informer's last list began (see Relist).
	scanned int
	// wave is closed once the relist due next has been stored; every
	// Relist joins it until it begins. relisting is set while the
	// goroutine that runs the waves does.
	wave      chan struct{}
	relisting bool
}

// NewRegistry returns a Registry that starts informers once Run is called.
func NewRegistry(client dynamic.Interface, opts Options) *Registry {
	return &Registry{client: client, opts: opts, entries: map[schema.GroupVersionResource]*entry{}}
}

// Acquire says the caller needs gvr watched. It starts the informer if the
// registry is running and this is the first Acquire of gvr.
func (r *Registry) Acquire(gvr schema.GroupVersionResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[gvr]
	if e == nil {
		e = &entry{gvr: gvr}
		r.entries[gvr] = e
	}
	e.refs++
	if e.refs == 1 && r.ctx != nil {
		r.startLocked(e)
	}
}

// Release undoes one Acquire. The last Release stops the informer and waits
// for its goroutine to exit; no event is delivered after that.
func (r *Registry) Release(gvr schema.GroupVersionResource) {
	r.mu.Lock()
	e := r.entries[gvr]
	if e == nil {
		r.mu.Unlock()
		return
	}
	e.refs--
	if e.refs > 0 {
		r.mu.Unlock()
		return
	}
	delete(r.entries, gvr)
	done := r.stopLocked(e)
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Get returns the stored object: what Options.Store returned for it (by
// default the *unstructured.Unstructured). An object that was not tracked
// when its last event arrived is not stored, so exists is false both for an
// object that is gone and for one that became tracked since; callers that
// need to tell them apart ask the API server. synced is false while the
// type's informer is not current (see Current): before its first list, or
// while its list or watch fails, when what it stores may be out of date.
func (r *Registry) Get(gvr schema.GroupVersionResource, namespace, name string) (obj any, exists, synced bool, err error) {
	r.mu.Lock()
	e := r.entries[gvr]
	var store *trackingStore
	if e != nil && e.cancel != nil && e.health.Current() {
		store = e.store
	}
	r.mu.Unlock()
	if store == nil || !store.HasSynced() {
		return nil, false, false, nil
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, exists, err = store.GetByKey(key)
	return obj, exists, true, err
}

// Current reports whether gvr's informer runs and sees its objects as they
// are now: it has listed them, and no list or watch has failed since. A
// lock over objects of a type that is not current cannot see their
// changes, and must not claim to hold them.
func (r *Registry) Current(gvr schema.GroupVersionResource) bool {
	r.mu.Lock()
	e := r.entries[gvr]
	var store *trackingStore
	var health *Health
	if e != nil && e.cancel != nil {
		store, health = e.store, e.health
	}
	r.mu.Unlock()
	return store != nil && store.HasSynced() && health.Current()
}

// Err is why gvr's informer is not current: the error of its last failed
// list or watch, or nil when it has not failed (not listed yet, or
// current).
func (r *Registry) Err(gvr schema.GroupVersionResource) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[gvr]; e != nil && e.health != nil {
		return e.health.Err()
	}
	return nil
}

// WaitForSync waits until gvr's informer has finished its first list, ctx
// is done, or the type is not acquired or not served. A type a Hold keeps
// from starting is waited for until its list after the Hold. It reports
// whether the informer synced.
func (r *Registry) WaitForSync(ctx context.Context, gvr schema.GroupVersionResource) bool {
	return r.waitForSync(ctx, gvr, false)
}

// WaitForList is WaitForSync for a caller that would rather read the
// objects one by one than wait on a list that fails: it also gives up once
// the informer's list or watch has failed (see Err), as when the locker may
// not list the type. A long list that is still running is waited for.
func (r *Registry) WaitForList(ctx context.Context, gvr schema.GroupVersionResource) bool {
	return r.waitForSync(ctx, gvr, true)
}

func (r *Registry) waitForSync(ctx context.Context, gvr schema.GroupVersionResource, unlessFailing bool) bool {
	for {
		r.mu.Lock()
		e := r.entries[gvr]
		var store *trackingStore
		var health *Health
		if e != nil && e.cancel != nil {
			store, health = e.store, e.health
		}
		running := r.ctx != nil
		// A type acquired while a Hold lasts lists once it is released:
		// its caller waits for that list as for any first list, where
		// giving up would have it read each object alone.
		held := e != nil && e.refs > 0 && e.cancel == nil && !e.missing && r.holds > 0
		r.mu.Unlock()
		if !running || (store == nil && !held) {
			return false
		}
		if store != nil && store.HasSynced() {
			return true
		}
		if unlessFailing && health != nil && health.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// WaitForAllSynced waits until Run has started and every informer it runs
// has finished its first list, or ctx is done.
func (r *Registry) WaitForAllSynced(ctx context.Context) bool {
	for {
		r.mu.Lock()
		running := r.ctx != nil
		r.mu.Unlock()
		if running {
			break
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, gvr := range r.Running() {
		if !r.WaitForSync(ctx, gvr) && ctx.Err() != nil {
			return false
		}
	}
	return true
}

// Refs counts the Acquires of gvr not yet Released, for tests.
func (r *Registry) Refs(gvr schema.GroupVersionResource) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[gvr]; e != nil {
		return e.refs
	}
	return 0
}

// Running lists the types whose informers run now, for tests and metrics.
func (r *Registry) Running() []schema.GroupVersionResource {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []schema.GroupVersionResource
	for gvr, e := range r.entries {
		if e.cancel != nil {
			out = append(out, gvr)
		}
	}
	return out
}

// Run starts the informers acquired so far and any acquired later, watches
// CRDs, and blocks until ctx is done. It then stops every informer and waits
// for all of them to exit.
func (r *Registry) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.ctx != nil {
		r.mu.Unlock()
		return errors.New("informers: Registry.Run called twice")
	}
	if r.opts.Config != nil {
		// Guard, not client-go, paces retries (see WatchConfig).
		cfg := WatchConfig(r.opts.Config)
		client, err := dynamic.NewForConfig(cfg)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		w, err := newWatchClient(cfg)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		r.client, r.watches = client, w
		if r.opts.Readiness == nil {
			if r.opts.Readiness, err = NewProbeForConfig(r.opts.Config); err != nil {
				r.mu.Unlock()
				return err
			}
		}
	}
	r.ctx = ctx
	for _, e := range r.entries {
		r.startLocked(e)
	}
	r.mu.Unlock()

	crds := r.watchCRDs(ctx)

	<-ctx.Done()
	r.mu.Lock()
	r.ctx = nil
	for _, e := range r.entries {
		r.stopLocked(e)
	}
	r.mu.Unlock()
	<-crds
	r.wg.Wait()
	return nil
}

// startLocked starts e's informer, unless a Hold keeps it for later. r.mu
// must be held and r.ctx set.
func (r *Registry) startLocked(e *entry) {
	if e.cancel != nil || e.missing || r.holds > 0 {
		return
	}
	gvr := e.gvr
	e.store = newTrackingStore(gvr, r.strip, r.opts.Handler)
	e.health = NewHealth(func(current bool) {
		if r.opts.OnHealthChanged != nil {
			r.opts.OnHealthChanged(gvr, current)
		}
	})
	e.scanned = 0
	r.runLocked(e, nil)
}

// runLocked runs a reflector of e's type into e's store, once after is
// closed (nil: at once), and returns a channel closed once its first list
// has been stored. r.mu must be held and r.ctx set.
func (r *Registry) runLocked(e *entry, after <-chan struct{}) <-chan struct{} {
	store := &firstList{trackingStore: e.store, stored: make(chan struct{})}
	// No expected type: with Options.Config, untracked objects arrive as
	// stubs rather than as Unstructured.
	reflector := cache.NewReflectorWithOptions(
		cache.ToListWatcherWithWatchListSemantics(Guard(r.listWatch(e.gvr, e.store), r.opts.Readiness, e.health), r.client),
		nil, store,
		cache.ReflectorOptions{Name: "helm-locker", TypeDescription: e.gvr.String(), Backoff: relistBackoff()})
	ctx, cancel := context.WithCancel(r.ctx)
	done := make(chan struct{})
	e.cancel, e.done = cancel, done
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		if after != nil {
			<-after
		}
		reflector.RunWithContext(ctx)
	}()
	return store.stored
}

// firstList is a reflector's view of a trackingStore: it tells when that
// reflector's first list has been stored.
type firstList struct {
	*trackingStore
	once   sync.Once
	stored chan struct{}
}

// Replace stores a list, and closes stored after the first.
func (f *firstList) Replace(list []any, resourceVersion string) error {
	if err := f.trackingStore.Replace(list, resourceVersion); err != nil {
		return err
	}
	f.once.Do(func() { close(f.stored) })
	return nil
}

// relistBackoff is the reflector's wait before it lists again after a
// watch ended in error, usually 410 Gone once the API server has compacted
// past the informer's resourceVersion: events are lost until that list, so
// the first wait is a quarter of client-go's 0.8 s. Outages never reach it
// (see Guard); errors that repeat still back off to client-go's 30 s.
func relistBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 8, Cap: 30 * time.Second}
}

// listWatch lists and watches gvr in every namespace. A NotFound from
// either means the type is gone, usually because its CRD was deleted: the
// informer stops rather than retry forever, and a CRD event starts it
// again.
func (r *Registry) listWatch(gvr schema.GroupVersionResource, store *trackingStore) *cache.ListWatch {
	resource := r.client.Resource(gvr)
	missing := func(ctx context.Context, err error) error {
		// A stopped informer's last error says nothing about the
		// informer that may have replaced it.
		if apierrors.IsNotFound(err) && ctx.Err() == nil {
			go r.markMissing(gvr)
		}
		return err
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			list, err := resource.List(ctx, options)
			return list, missing(ctx, err)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			if r.watches == nil {
				w, err := resource.Watch(ctx, options)
				return w, missing(ctx, err)
			}
			d := &objectDecoder{
				tracked: func(namespace, name string) bool {
					return r.opts.Tracked == nil || r.opts.Tracked(gvr, namespace, name)
				},
				unchanged: unchanged(store),
			}
			if held := r.opts.HeldMetadata; held != nil {
				d.held = func(namespace, name string) *HeldMetadata { return held(gvr, namespace, name) }
			}
			if reads := r.opts.ReadsManagedFields; reads != nil {
				d.readsManagedFields = func(namespace, name string) bool { return reads(gvr, namespace, name) }
			}
			w, err := r.watches.watch(ctx, gvr, d, options)
			return w, missing(ctx, err)
		},
	}
}

// stopLocked cancels e's informer, returning a channel closed once its
// goroutine has exited (nil if it was not running). r.mu must be held.
func (r *Registry) stopLocked(e *entry) <-chan struct{} {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	done := e.done
	e.store, e.health, e.cancel, e.done = nil, nil, nil, nil
	return done
}

func (r *Registry) markMissing(gvr schema.GroupVersionResource) {
	r.mu.Lock()
	e := r.entries[gvr]
	if e == nil || e.missing {
		r.mu.Unlock()
		return
	}
	e.missing = true
	done := r.stopLocked(e)
	r.mu.Unlock()
	if done != nil {
		<-done
	}
	if r.opts.OnTypesChanged != nil {
		r.opts.OnTypesChanged()
	}
}

// retryMissing restarts informers whose type was missing, after a CRD
// change.
func (r *Registry) retryMissing() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		return
	}
	for _, e := range r.entries {
		if e.missing {
			e.missing = false
			r.startLocked(e)
		}
	}
}

// strip turns an untracked object into a *Stub, which process does not
// store, and a tracked one into what Options.Store keeps of it.
func (r *Registry) strip(gvr schema.GroupVersionResource, obj any) any {
	if s, ok := obj.(*watchStub); ok {
		if s.same {
			return s // the store keeps what it has
		}
		return &s.Stub
	}
	var fingerprint uint64
	var managedFields []byte
	if f, ok := obj.(*fingerprinted); ok {
		obj, fingerprint, managedFields = f.Unstructured, f.fingerprint, f.managedFields
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj
	}
	if r.opts.Tracked != nil && !r.opts.Tracked(gvr, u.GetNamespace(), u.GetName()) {
		return NewStub(u)
	}
	var stored metav1.Object = u
	if r.opts.Store != nil {
		stored = r.opts.Store(gvr, u)
	}
	if s, ok := stored.(stubbed); ok {
		if sr, ok := stored.(StatusReader); !ok || !sr.ReadsStatus() {
			s.stub().fingerprint = fingerprint
		}
		return stored
	}
	if managedFields != nil && stored == metav1.Object(u) {
		withManagedFields(u, managedFields)
	}
	return stored
}

// unchanged reports whether store holds namespace/name as a stub of a
// version with this held fingerprint.
func unchanged(store *trackingStore) func(namespace, name string, fingerprint uint64) bool {
	return func(namespace, name string, fingerprint uint64) bool {
		key := name
		if namespace != "" {
			key = namespace + "/" + name
		}
		obj, exists, err := store.GetByKey(key)
		if err != nil || !exists {
			return false
		}
		s, ok := obj.(stubbed)
		return ok && s.stub().fingerprint == fingerprint
	}
}

package informers

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// trackingStore is what a Registry's reflector writes into. It stores
// tracked objects only and calls the Handler for every change, so an
// informer costs nothing per object no caller tracks: a SharedIndexInformer
// keeps whatever its transform returns, and its DeltaFIFO keeps a map
// entry and a key for every object it ever queued, about 100 bytes each.
type trackingStore struct {
	gvr     schema.GroupVersionResource
	strip   func(schema.GroupVersionResource, any) any
	handler Handler
	objects cache.Store
	synced  atomic.Bool
	// size is how many objects, tracked or not, the last list read.
	size atomic.Int64
}

var _ cache.TransformingStore = (*trackingStore)(nil)

func newTrackingStore(gvr schema.GroupVersionResource, strip func(schema.GroupVersionResource, any) any, handler Handler) *trackingStore {
	return &trackingStore{gvr: gvr, strip: strip, handler: handler, objects: cache.NewStore(keyOf)}
}

// Transformer lets the reflector strip objects as they stream in during a
// watch-list, rather than hold them whole until the list ends.
func (s *trackingStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) { return s.strip(s.gvr, obj), nil }
}

// listed is how many objects, tracked or not, the last list read.
func (s *trackingStore) listed() int { return int(s.size.Load()) }

// HasSynced reports whether the first list has been stored.
func (s *trackingStore) HasSynced() bool { return s.synced.Load() }

// GetByKey returns a stored (tracked) object.
func (s *trackingStore) GetByKey(key string) (any, bool, error) { return s.objects.GetByKey(key) }

func (s *trackingStore) Add(obj any) error    { return s.upsert(obj) }
func (s *trackingStore) Update(obj any) error { return s.upsert(obj) }
func (s *trackingStore) Resync() error        { return nil }

func (s *trackingStore) upsert(obj any) error {
	if w, ok := obj.(*watchStub); ok && w.same {
		// Nothing a lock holds changed (see objectDecoder).
		return nil
	}
	obj = s.strip(s.gvr, obj)
	var err error
	if _, untracked := obj.(*Stub); untracked {
		// An object that is no longer tracked leaves the store;
		// deleting an absent key does nothing.
		err = s.objects.Delete(obj)
	} else {
		err = s.objects.Update(obj)
	}
	if err != nil {
		return err
	}
	s.notify(obj)
	return nil
}

func (s *trackingStore) Delete(obj any) error {
	if w, ok := obj.(*watchStub); ok {
		obj = &w.Stub
	}
	if err := s.objects.Delete(obj); err != nil {
		return err
	}
	s.notify(obj)
	return nil
}

// keyOf is the store's key function: a stub's key is part of its own
// string (see Stub), so keying a stored stub allocates nothing and the
// store's map holds no string of its own for it.
func keyOf(obj any) (string, error) {
	if s, ok := obj.(stubbed); ok {
		return s.stub().key(), nil
	}
	return cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
}

// Replace stores a fresh list: stored objects missing from it were deleted
// while the watch was down, and are reported as
// cache.DeletedFinalStateUnknown.
func (s *trackingStore) Replace(list []any, _ string) error {
	listed := make(map[string]struct{}, len(list))
	for _, obj := range list {
		key, err := keyOf(obj)
		if err != nil {
			return err
		}
		listed[key] = struct{}{}
	}
	for _, key := range s.objects.ListKeys() {
		if _, ok := listed[key]; ok {
			continue
		}
		old, exists, err := s.objects.GetByKey(key)
		if err != nil || !exists {
			continue
		}
		if err := s.objects.Delete(old); err != nil {
			return err
		}
		s.notify(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	for _, obj := range list {
		if err := s.upsert(obj); err != nil {
			return err
		}
	}
	s.size.Store(int64(len(list)))
	s.synced.Store(true)
	return nil
}

func (s *trackingStore) notify(obj any) {
	if s.handler != nil {
		s.handler(s.gvr, obj)
	}
}

package controller

import (
	"sync"

	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
)

// lockKey is what the queue carries: one HelmRelease or one ManifestLock.
// It is comparable, so client-go's typed workqueue dedups and rate-limits
// it as it is; nothing is read back from a string.
type lockKey struct {
	// kind is v1alpha1.Kind or mlv1.Kind.
	kind string
	// ObjectName is the CR's namespace and name; its String is the CR's
	// key in its informer's cache.
	cache.ObjectName
}

func helmReleaseKey(namespace, name string) lockKey {
	return lockKey{kind: v1alpha1.Kind, ObjectName: cache.NewObjectName(namespace, name)}
}

func manifestLockKey(namespace, name string) lockKey {
	return lockKey{kind: mlv1.Kind, ObjectName: cache.NewObjectName(namespace, name)}
}

// keyOf returns the key of obj, a CR of kind from an informer, deleted or
// not.
func keyOf(kind string, obj any) (lockKey, bool) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	return lockKey{kind: kind, ObjectName: name}, err == nil
}

// isManifestLock reports whether k is a ManifestLock's.
func (k lockKey) isManifestLock() bool { return k.kind == mlv1.Kind }

// String names the lock for a person, "HelmRelease ns/name" or
// "ManifestLock ns/name", and is the key of its set in the engine, so that
// a message naming the set that holds an object (engine.Conflict's Holder)
// names the lock as it is.
func (k lockKey) String() string { return k.kind + " " + k.ObjectName.String() }

// setKeys maps the engine key of each set the controller declared back to
// its lockKey, for what the engine hands back by set key: the sets to sync
// again, and the set holding an object that admission judges. A key is
// added before its set is declared and removed after the set is forgotten,
// by the worker syncing it, so the engine names no set the map lacks.
type setKeys struct {
	mu   sync.RWMutex
	keys map[string]lockKey
}

func (s *setKeys) add(k lockKey) string {
	key := k.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string]lockKey{}
	}
	s.keys[key] = k
	return key
}

func (s *setKeys) remove(k lockKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, k.String())
}

// lockKey returns the lockKey of the engine's set key, and false for a
// set the controller does not hold (any more).
func (s *setKeys) lockKey(key string) (lockKey, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.keys[key]
	return k, ok
}

// declareSet declares the objects of key's lock to the engine.
func (c *Controller) declareSet(key lockKey, set engine.ObjectSet) {
	c.engine.Declare(c.sets.add(key), set)
}

// open stops holding key's objects, leaving them as they are.
func (c *Controller) open(key lockKey) {
	c.engine.Forget(key.String())
	c.sets.remove(key)
}

// enqueueSet queues the lock of an engine set that needs a Sync.
func (c *Controller) enqueueSet(key string) {
	if k, ok := c.sets.lockKey(key); ok {
		c.queue.Add(k)
	}
}

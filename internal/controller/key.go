package controller

import (
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

// declareSet declares the objects of key's lock to the engine, under
// key.String(). c.sets maps that back to key, for what the engine hands
// back by set key: the sets to sync again, and the set holding an object
// that admission judges. The key is added before its set is declared and
// removed after the set is forgotten, by the worker syncing it, so the
// engine names no set c.sets lacks.
func (c *Controller) declareSet(key lockKey, set engine.ObjectSet) {
	c.sets.Set(key.String(), key)
	c.engine.Declare(key.String(), set)
}

// open stops holding key's objects, leaving them as they are.
func (c *Controller) open(key lockKey) {
	c.engine.Forget(key.String())
	c.sets.Delete(key.String())
}

// enqueueSet queues the lock of an engine set that needs a Sync.
func (c *Controller) enqueueSet(key string) {
	if k, ok := c.sets.Get(key); ok {
		c.queue.Add(k)
	}
}

package controller

import (
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/helm-locker/helm-locker/engine"
)

// TestLockKeys: a key names its lock; the queue holds one item per lock,
// a HelmRelease and a ManifestLock of the same name apart; and a set key
// the engine hands back maps to the key that declared it only while the
// set is held.
func TestLockKeys(t *testing.T) {
	hr, ml := helmReleaseKey("apps", "web"), manifestLockKey("apps", "web")
	if hr.String() != "HelmRelease apps/web" || ml.String() != "ManifestLock apps/web" {
		t.Errorf("keys name their locks %q and %q", hr, ml)
	}
	if hr.isManifestLock() || !ml.isManifestLock() {
		t.Error("isManifestLock mistakes the kind")
	}

	q := workqueue.NewTyped[lockKey]()
	defer q.ShutDown()
	q.Add(hr)
	q.Add(helmReleaseKey("apps", "web"))
	q.Add(ml)
	if q.Len() != 2 {
		t.Errorf("queue length = %d, want 2: one per lock", q.Len())
	}

	c, _ := newTestController(t, helmRelease(nil), nil, nil)
	c.declareSet(ml, engine.ObjectSet{})
	if got, ok := c.sets.Get(ml.String()); !ok || got != ml {
		t.Errorf("lock key of a declared set = %v, %v; want %v", got, ok, ml)
	}
	c.open(ml)
	if got, ok := c.sets.Get(ml.String()); ok {
		t.Errorf("lock key of a forgotten set = %v; want none", got)
	}
}

// declared notes k's set as declared, as declareSet does without declaring
// anything to the engine, and returns the set's key.
func declared(c *Controller, k lockKey) string {
	c.sets.Set(k.String(), k)
	return k.String()
}

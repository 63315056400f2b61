package controller

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
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

	var sets setKeys
	if got, ok := sets.lockKey(sets.add(ml)); !ok || got != ml {
		t.Errorf("lockKey of a declared set = %v, %v; want %v", got, ok, ml)
	}
	sets.remove(ml)
	if got, ok := sets.lockKey(ml.String()); ok {
		t.Errorf("lockKey of a forgotten set = %v; want none", got)
	}
}

package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestOpenLockKeepsItsObjects: a HelmRelease holds a ConfigMap that a later
// ManifestLock declares too. While the HelmRelease's lock is open because
// Helm works on the release, or a revision failed, or the CR is suspended,
// it keeps the ConfigMap: the ManifestLock stays in Conflict and writes
// nothing, and Prevent mode denies nothing. When the HelmRelease lets go
// (the release is uninstalled or gone, the CR is deleted), the ManifestLock
// takes the ConfigMap over.
func TestOpenLockKeepsItsObjects(t *testing.T) {
	var (
		hrKey = helmReleaseKey("cattle-helm-system", "hr")
		mlKey = manifestLockKey("cattle-helm-system", "ml")
	)
	tests := []struct {
		name string
		// open opens the HelmRelease's lock.
		open     func(t *testing.T, c *Controller)
		wantOpen v1alpha1.State
		takeover bool
	}{
		{name: "pending-upgrade", open: latest("pending-upgrade", 2), wantOpen: v1alpha1.StateTransitioning},
		{name: "pending-rollback", open: latest("pending-rollback", 2), wantOpen: v1alpha1.StateTransitioning},
		{name: "uninstalling", open: latest("uninstalling", 1), wantOpen: v1alpha1.StateTransitioning},
		{name: "failed", open: latest("failed", 2), wantOpen: v1alpha1.StateFailed},
		{name: "suspended", open: suspendCR, wantOpen: v1alpha1.StateSuspended},
		{name: "uninstalled", open: latest("uninstalled", 1), wantOpen: v1alpha1.StateUninstalled, takeover: true},
		{name: "release Secret deleted", open: deleteSecret, wantOpen: v1alpha1.StateSecretNotFound, takeover: true},
		{name: "CR deleted", open: deleteCR, takeover: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ml := configMapLock()
			hr := helmRelease(nil)
			hr.Object["spec"].(map[string]any)["mode"] = "Prevent"
			c, dyn := newTestController(t, hr, releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
				if err := dyn.Tracker().Create(mlv1.Resource, ml, "cattle-helm-system"); err != nil {
					t.Fatal(err)
				}
			})
			c.cfg.Recorder = record.NewFakeRecorder(100)
			sync := func(key lockKey) {
				t.Helper()
				if _, err := c.sync(ctx, key); err != nil {
					t.Fatalf("sync %s: %v", key, err)
				}
			}
			sync(hrKey)
			cacheManifestLock(t, c, ml)
			sync(mlKey)
			if v := configMapKey(t, dyn); v != "declared" {
				t.Fatalf("data.key = %q with both locks declared; want the HelmRelease's, declared", v)
			}

			tt.open(t, c)
			sync(hrKey)
			if tt.wantOpen != "" {
				if st := statusOf(t, dyn); st.State != tt.wantOpen {
					t.Fatalf("HelmRelease state = %q; want %q", st.State, tt.wantOpen)
				}
			}
			live := configMap(t, dyn)
			edited := live.DeepCopy()
			_ = unstructured.SetNestedField(edited.Object, "helm's next value", "data", "key")
			if j, err := c.Judge(cmGVR, live, edited); err != nil || j.Denied() {
				t.Errorf("Judge of a change while the lock is open = %+v, %v; want allowed", j, err)
			}
			dyn.ClearActions()
			sync(mlKey)
			res, err := c.engine.Sync(ctx, mlKey.String())
			if err != nil {
				t.Fatal(err)
			}
			if !tt.takeover {
				if len(res.Conflicts) != 1 || res.Conflicts[0].Holder != hrKey.String() {
					t.Errorf("the ManifestLock's conflicts = %+v; want the ConfigMap, held by %s", res.Conflicts, hrKey)
				}
				if n := configMapWrites(dyn); n != 0 {
					t.Errorf("the ManifestLock wrote the ConfigMap %d times while the HelmRelease's lock was open; want none", n)
				}
				if v := configMapKey(t, dyn); v != "declared" {
					t.Errorf("data.key = %q while the HelmRelease's lock is open; want declared", v)
				}
				return
			}
			if len(res.Conflicts) != 0 {
				t.Errorf("the ManifestLock's conflicts = %+v once the HelmRelease let go; want none", res.Conflicts)
			}
			if v := configMapKey(t, dyn); v != "from-manifestlock" {
				t.Errorf("data.key = %q once the HelmRelease let go; want the ManifestLock's, from-manifestlock", v)
			}
		})
	}
}

// TestRestartWhileHelmWorksKeepsTheObjects: a locker that starts while
// Helm upgrades a release holds nothing yet. Its HelmRelease's status names
// the verified revision, whose Secret still holds the verified manifest:
// the lock declares that revision paused, so a ManifestLock that declares
// one of its objects waits in Conflict and writes nothing, as it did
// before the restart. A manifest rewritten since it was verified is not
// held.
func TestRestartWhileHelmWorksKeepsTheObjects(t *testing.T) {
	hrKey := helmReleaseKey("cattle-helm-system", "hr")
	mlKey := manifestLockKey("cattle-helm-system", "ml")
	for _, tt := range []struct {
		name     string
		digest   string
		takeover bool
	}{
		{name: "verified manifest", digest: manifestDigest(manifestYAML)},
		{name: "manifest rewritten since", digest: manifestDigest("something else"), takeover: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ml := configMapLock()
			cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cm", "namespace": "apps"}, "data": map[string]any{"key": "declared"}}}
			hr := helmRelease(nil)
			hr.Object["status"] = map[string]any{"verified": map[string]any{
				"release": map[string]any{"name": "rel", "namespace": "apps"}, "revision": int64(1), "manifestDigest": tt.digest}}
			c, dyn := newTestController(t, hr, releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
				if err := dyn.Tracker().Create(mlv1.Resource, ml, "cattle-helm-system"); err != nil {
					t.Fatal(err)
				}
				if err := dyn.Tracker().Create(cmGVR, cm, "apps"); err != nil {
					t.Fatal(err)
				}
			})
			c.cfg.Recorder = record.NewFakeRecorder(100)
			latest("pending-upgrade", 2)(t, c)
			if _, err := c.sync(ctx, hrKey); err != nil {
				t.Fatal(err)
			}
			if st := statusOf(t, dyn); st.State != v1alpha1.StateTransitioning {
				t.Fatalf("HelmRelease state = %q; want Transitioning", st.State)
			}
			cacheManifestLock(t, c, ml)
			dyn.ClearActions()
			if _, err := c.sync(ctx, mlKey); err != nil {
				t.Fatal(err)
			}
			res, err := c.engine.Sync(ctx, mlKey.String())
			if err != nil {
				t.Fatal(err)
			}
			if tt.takeover {
				if len(res.Conflicts) != 0 || configMapKey(t, dyn) != "from-manifestlock" {
					t.Errorf("conflicts %+v, data.key %q; want the ManifestLock to hold the ConfigMap: the verified manifest is gone", res.Conflicts, configMapKey(t, dyn))
				}
				return
			}
			if len(res.Conflicts) != 1 || res.Conflicts[0].Holder != hrKey.String() {
				t.Errorf("the ManifestLock's conflicts = %+v; want the ConfigMap, held by %s", res.Conflicts, hrKey)
			}
			if n := configMapWrites(dyn); n != 0 || configMapKey(t, dyn) != "declared" {
				t.Errorf("the ManifestLock wrote the ConfigMap %d times (data.key %q) while Helm upgrades the release; want none", n, configMapKey(t, dyn))
			}
		})
	}
}

// latest makes a revision with status the release's latest, in the cache.
func latest(status string, version int) func(t *testing.T, c *Controller) {
	return func(t *testing.T, c *Controller) {
		t.Helper()
		s := releaseSecret(t, status, version)
		if err := c.secrets.GetIndexer().Update(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: s.ObjectMeta}); err != nil {
			t.Fatal(err)
		}
	}
}

func deleteSecret(t *testing.T, c *Controller) {
	t.Helper()
	s := releaseSecret(t, "deployed", 1)
	if err := c.secrets.GetIndexer().Delete(&metav1.PartialObjectMetadata{ObjectMeta: s.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
}

// suspendCR suspends the HelmRelease.
func suspendCR(t *testing.T, c *Controller) {
	t.Helper()
	updateCR(t, c, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, true, "spec", "suspend")
	}, func(hr *v1alpha1.HelmRelease) bool { return hr.Spec.Suspend })
}

// configMapLock is a ManifestLock declaring apps/cm, the ConfigMap the
// HelmRelease of these tests declares too.
func configMapLock() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "ml", "namespace": "cattle-helm-system", "generation": int64(1)},
		"spec": map[string]any{"namespace": "apps",
			"manifest": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: from-manifestlock\n"},
	}}
}

func configMap(t *testing.T, dyn *dynamicfake.FakeDynamicClient) *unstructured.Unstructured {
	t.Helper()
	live, err := dyn.Resource(cmGVR).Namespace("apps").Get(context.Background(), "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func configMapKey(t *testing.T, dyn *dynamicfake.FakeDynamicClient) string {
	t.Helper()
	v, _, _ := unstructured.NestedString(configMap(t, dyn).Object, "data", "key")
	return v
}

// configMapWrites counts the writes to ConfigMaps, dry runs aside.
func configMapWrites(dyn *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range dyn.Actions() {
		if a.GetResource() != cmGVR {
			continue
		}
		switch a := a.(type) {
		case clienttesting.PatchActionImpl:
			if len(a.PatchOptions.DryRun) == 0 {
				n++
			}
		case clienttesting.CreateActionImpl, clienttesting.UpdateActionImpl, clienttesting.DeleteActionImpl:
			n++
		}
	}
	return n
}

package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestPruneWriters: the impersonating clients of identities that no
// HelmRelease or ManifestLock names any more are dropped, and those in use
// kept, so that locks coming and going never grow the map for good.
func TestPruneWriters(t *testing.T) {
	c := &Controller{
		cfg:     Config{Namespace: "reg", REST: &rest.Config{Host: "https://127.0.0.1:1"}},
		writers: map[string]dynamic.Interface{},
		crs:     cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{}),
		locks:   cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{}),
	}
	hr := &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "reg", Name: "web"},
		Spec: v1alpha1.HelmReleaseSpec{Release: v1alpha1.ReleaseKey{Namespace: "apps", Name: "web"}, ServiceAccountName: "deployer"}}
	tenant := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}, Spec: mlv1.ManifestLockSpec{ServiceAccountName: "writer"}}
	other := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "other"}, Spec: mlv1.ManifestLockSpec{ServiceAccountName: "gone"}}
	for _, obj := range []any{hr, tenant, other} {
		store := c.locks.GetIndexer()
		if _, ok := obj.(*v1alpha1.HelmRelease); ok {
			store = c.crs.GetIndexer()
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range [][2]string{{"apps", "deployer"}, {"team", "writer"}, {"team", "gone"}, {"team", "default"}} {
		if _, err := c.writerFor(id[0], id[1]); err != nil {
			t.Fatal(err)
		}
	}
	users := func() []string {
		var out []string
		for u := range c.writers {
			out = append(out, u)
		}
		slices.Sort(out)
		return out
	}
	if dropped := c.pruneWriters(); dropped != 1 {
		t.Errorf("pruneWriters dropped %d; want 1, the default account no lock names", dropped)
	}
	want := []string{"system:serviceaccount:apps:deployer", "system:serviceaccount:team:gone", "system:serviceaccount:team:writer"}
	if diff := cmp.Diff(want, users()); diff != "" {
		t.Errorf("writers after the first sweep (-want +got):\n%s", diff)
	}

	// The lock that named "gone" is deleted, the CR goes: their writers go
	// with them.
	_ = c.locks.GetIndexer().Delete(other)
	_ = c.crs.GetIndexer().Delete(hr)
	c.pruneWriters()
	if diff := cmp.Diff([]string{"system:serviceaccount:team:writer"}, users()); diff != "" {
		t.Errorf("writers after the deletions (-want +got):\n%s", diff)
	}
	w1 := c.writers["system:serviceaccount:team:writer"]
	if w2, _ := c.writerFor("team", "writer"); w2 != w1 {
		t.Error("the writer in use was rebuilt; want it kept")
	}
}

// TestWriterChangeAsksForASweep: an update that changes the identity a
// HelmRelease or ManifestLock writes as asks for a sweep of the writers,
// as a delete does, so that a tenant who keeps changing
// spec.serviceAccountName does not grow them without bound; other updates
// ask nothing.
func TestWriterChangeAsksForASweep(t *testing.T) {
	hr := helmRelease(nil)
	c, dyn := newTestController(t, hr, nil, nil)
	ctx := t.Context()
	locksDone := make(chan struct{})
	lockCtx, stopLocks := context.WithCancel(ctx)
	go func() {
		defer close(locksDone)
		c.locks.RunWithContext(lockCtx)
	}()
	t.Cleanup(func() {
		stopLocks()
		<-locksDone
	})
	ml := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "app", "namespace": "cattle-helm-system"},
		"spec":     map[string]any{"manifest": manifestYAML, "serviceAccountName": "a"},
	}}
	if _, err := dyn.Resource(mlv1.Resource).Namespace("cattle-helm-system").Create(ctx, ml, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.locks.HasSynced) {
		t.Fatal("the ManifestLock cache did not sync")
	}
	swept := func(what string) {
		t.Helper()
		select {
		case <-c.sweep:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no sweep of the writers asked for", what)
		}
	}
	for _, tt := range []struct {
		what     string
		resource schema.GroupVersionResource
		name     string
	}{
		{"a HelmRelease's new serviceAccountName", v1alpha1.Resource, "hr"},
		{"a ManifestLock's new serviceAccountName", mlv1.Resource, "app"},
	} {
		for _, sa := range []string{"b", "c"} {
			patch := []byte(`{"spec":{"serviceAccountName":"` + sa + `"}}`)
			if _, err := dyn.Resource(tt.resource).Namespace("cattle-helm-system").Patch(ctx, tt.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			swept(tt.what + " " + sa)
		}
	}

	// The same writer before and after: nothing to sweep.
	a := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}, Spec: mlv1.ManifestLockSpec{ServiceAccountName: "a"}}
	relabelled := a.DeepCopy()
	relabelled.Labels = map[string]string{"team": "ops"}
	c.writerMayBeUnused(a, relabelled)
	select {
	case <-c.sweep:
		t.Error("an update that keeps the writer asked for a sweep")
	default:
	}
}

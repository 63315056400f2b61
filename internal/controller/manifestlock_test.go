package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
)

// TestServesManifestLock: one locker per lock, whatever the cluster runs.
func TestServesManifestLock(t *testing.T) {
	lock := func(namespace, owner string) *mlv1.ManifestLock {
		ml := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "l"}}
		if owner != "" {
			ml.Annotations = map[string]string{mlv1.ManagedByAnnotation: owner}
		}
		return ml
	}
	tests := []struct {
		name    string
		tenants bool
		ml      *mlv1.ManifestLock
		want    bool
	}{
		{"registration namespace", false, lock("reg", ""), true},
		{"registration namespace, another controller's", true, lock("reg", "other"), false},
		{"tenant, served", true, lock("apps", ""), true},
		{"tenant, not served here", false, lock("apps", ""), false},
		{"tenant, named to this controller", false, lock("apps", "me"), true},
		{"tenant, named to another", true, lock("apps", "other"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Controller{cfg: Config{Namespace: "reg", ControllerName: "me", TenantManifestLocks: tt.tenants}}
			if got := c.servesManifestLock(tt.ml); got != tt.want {
				t.Errorf("servesManifestLock = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDeclareAllDeclaresManifestLocks: by the time the controller says it
// is synced (declareAll has returned), a Prevent ManifestLock's types are
// in the webhook's rules and its objects are judged, on a leader and on a
// replica standing by, though no worker has synced it yet. On a leader the
// first sync then creates what the lock declared and lists it in the
// inventory; a replica standing by writes nothing.
func TestDeclareAllDeclaresManifestLocks(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	secret := func(value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "s", "namespace": "apps"}, "data": map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(value))}}}
	}
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%v", readOnly), func(t *testing.T) {
			ctx := context.Background()
			lock := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
				"metadata": map[string]any{"name": "ml", "namespace": "cattle-helm-system", "generation": int64(1)},
				"spec": map[string]any{"namespace": "apps", "mode": "Prevent",
					"manifest": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata:\n  key: ZGVjbGFyZWQ=\n"},
			}}
			withSecrets := func(cfg *Config) {
				cfg.Mapper.(resettable).RESTMapper.(*meta.DefaultRESTMapper).Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
				cfg.ReadOnly = readOnly
			}
			c, dyn := newManifestLockController(t, withSecrets, lock)

			c.declareAll(ctx)
			if got := c.PreventedTypes(); !slices.Contains(got, secrets) {
				t.Errorf("PreventedTypes after declareAll = %v, want %v among them", got, secrets)
			}
			j, err := c.Judge(secrets, secret("declared"), secret("edited"))
			if err != nil || !j.Denied() || j.Key != manifestLockKey("cattle-helm-system", "ml").String() {
				t.Errorf("Judge of an edit after declareAll = %+v, %v; want it denied by the ManifestLock", j, err)
			}

			dyn.ClearActions()
			if _, err := c.sync(ctx, manifestLockKey("cattle-helm-system", "ml")); err != nil {
				t.Fatal(err)
			}
			if readOnly {
				if got := writes(dyn); len(got) > 0 {
					t.Errorf("a replica standing by wrote %v", got)
				}
				return
			}
			if _, err := dyn.Resource(secrets).Namespace("apps").Get(ctx, "s", metav1.GetOptions{}); err != nil {
				t.Errorf("the first sync after declareAll did not create the lock's Secret: %v", err)
			}
			u, err := dyn.Resource(mlv1.Resource).Namespace("cattle-helm-system").Get(ctx, "ml", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ml := &mlv1.ManifestLock{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ml); err != nil {
				t.Fatal(err)
			}
			want := []mlv1.ObjectRef{{APIVersion: "v1", Kind: "Secret", Namespace: "apps", Name: "s"}}
			if ml.Status.State != mlv1.StateLocked || !slices.Equal(ml.Status.Inventory, want) {
				t.Errorf("after the first sync: state %q, inventory %v; want %s and %v", ml.Status.State, ml.Status.Inventory, mlv1.StateLocked, want)
			}
		})
	}
}

// newManifestLockController is newTestControllerWith with lock stored and
// in the controller's cache, as its informer would have it.
func newManifestLockController(t *testing.T, configure func(*Config), lock *unstructured.Unstructured) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	c, dyn := newTestControllerWith(t, configure, helmRelease(nil), nil, func(dyn *dynamicfake.FakeDynamicClient) {
		if err := dyn.Tracker().Create(mlv1.Resource, lock, lock.GetNamespace()); err != nil {
			t.Fatal(err)
		}
	})
	cacheManifestLock(t, c, lock)
	return c, dyn
}

// cacheManifestLock puts lock in c's cache of ManifestLocks, as the
// informer keeps it.
func cacheManifestLock(t *testing.T, c *Controller, lock *unstructured.Unstructured) {
	t.Helper()
	cached, err := compact[mlv1.ManifestLock](lock.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.locks.GetIndexer().Add(cached); err != nil {
		t.Fatal(err)
	}
}

package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
)

// TestPermits holds the ServiceAccount opt-in to the names it lists.
func TestPermits(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  bool
	}{
		{"", false}, {"app", true}, {"other", false}, {"other, app", true}, {"*", true}, {"ap", false}, {"app2,apps", false},
	} {
		if got := permits(tt.value, "app"); got != tt.want {
			t.Errorf("permits(%q, app) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// TestJudgesFor: Prevent judges for a tenant's lock only what carries its
// marker and not Helm's ownership; for an admin's lock, all it holds.
func TestJudgesFor(t *testing.T) {
	c := &Controller{cfg: Config{Namespace: "reg"}}
	object := func(annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "team"}}}
		u.SetAnnotations(annotations)
		return u
	}
	marked := map[string]string{mlv1.MarkerAnnotation: "team/app"}
	helm := map[string]string{mlv1.MarkerAnnotation: "team/app", "meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "team"}
	tenant, admin := manifestLockPrefix+"team/app", manifestLockPrefix+"reg/app"
	for _, tt := range []struct {
		name     string
		key      string
		old, obj *unstructured.Unstructured
		want     bool
	}{
		{"an admin's ManifestLock", admin, object(nil), object(nil), true},
		{"a HelmRelease", "reg/web", object(nil), object(nil), true},
		{"the tenant's own object", tenant, object(marked), object(nil), true},
		{"an update that drops the marker", tenant, object(marked), object(nil), true},
		{"an object without the marker", tenant, object(nil), object(marked), false},
		{"another lock's marker", tenant, object(map[string]string{mlv1.MarkerAnnotation: "team/other"}), object(nil), false},
		{"installed by Helm, marker and all", tenant, object(helm), object(helm), false},
		{"deleted: the object as it was", tenant, object(marked), nil, true},
		{"created without the marker", tenant, nil, object(nil), false},
		{"created by Helm", tenant, nil, object(helm), false},
		{"created with the marker", tenant, nil, object(marked), true},
	} {
		if got := c.judgesFor(tt.key, tt.old, tt.obj); got != tt.want {
			t.Errorf("%s: judgesFor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestAppearedUnmade: an object the lock was to create that someone else
// made (it exists and differs) sends a tenant's lock back to decide
// whether it may hold it; the lock's own creation does not.
func TestAppearedUnmade(t *testing.T) {
	rb := engine.ObjectRef{GVR: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, Namespace: "team", Name: "viewers"}
	st := &manifestState{missing: map[mlv1.ObjectRef]bool{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding", Namespace: "team", Name: "viewers"}: true}}
	created := engine.Result{Drifts: []engine.Drift{{Ref: rb, Kind: "RoleBinding", Deleted: true, Corrected: true}}}
	if appearedUnmade(st, created) {
		t.Error("appearedUnmade of the lock's own creation = true")
	}
	made := engine.Result{Drifts: []engine.Drift{{Ref: rb, Kind: "RoleBinding", Paths: []string{"/metadata/annotations/helm-locker.io~1manifest-lock"}}}}
	if !appearedUnmade(st, made) {
		t.Error("appearedUnmade of an object someone else made = false")
	}
	if appearedUnmade(&manifestState{}, made) {
		t.Error("appearedUnmade of an object the lock did not wait for = true")
	}
}

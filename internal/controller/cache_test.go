package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestCompactCR holds the CR cache to the typed CR without its
// managedFields, and a CR that does not convert to what came.
func TestCompactCR(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.cattle.io/v1alpha1", "kind": "HelmRelease",
		"metadata": map[string]any{
			"name": "hr", "namespace": "cattle-helm-system", "resourceVersion": "7",
			"managedFields": []any{map[string]any{"manager": "helm-locker", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:status": map[string]any{}}}},
		},
		"spec":   map[string]any{"release": map[string]any{"name": "app", "namespace": "apps"}, "ignore": []any{map[string]any{"paths": []any{"/spec/replicas"}}}},
		"status": map[string]any{"state": "Deployed", "version": int64(3)},
	}}
	got, err := compact[v1alpha1.HelmRelease](u)
	if err != nil {
		t.Fatal(err)
	}
	hr, ok := got.(*v1alpha1.HelmRelease)
	if !ok {
		t.Fatalf("compact gave %T, want *v1alpha1.HelmRelease", got)
	}
	if hr.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", hr.ManagedFields)
	}
	want := v1alpha1.HelmReleaseSpec{Release: v1alpha1.ReleaseKey{Name: "app", Namespace: "apps"}, Ignore: []v1alpha1.IgnoreRule{{Paths: []string{"/spec/replicas"}}}}
	if diff := cmp.Diff(want, hr.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if hr.Status.Version != 3 || hr.ResourceVersion != "7" {
		t.Errorf("status version %d, resourceVersion %q; want 3 and 7", hr.Status.Version, hr.ResourceVersion)
	}
	if keys, _ := crReleaseIndex(hr); len(keys) != 1 || keys[0] != "apps/app" {
		t.Errorf("release index %v, want [apps/app]", keys)
	}

	// A copy shares nothing with the cached CR.
	c := hr.DeepCopy()
	c.Spec.Ignore[0].Paths[0] = "/changed"
	c.Labels = map[string]string{"changed": "yes"}
	c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: "Locked"})
	if hr.Spec.Ignore[0].Paths[0] != "/spec/replicas" || hr.Labels != nil || hr.Status.Conditions != nil {
		t.Errorf("changing a DeepCopy changed the cached CR: %+v", hr)
	}

	bad := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "helm.cattle.io/v1alpha1", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "bad"}, "spec": "not an object"}}
	if got, _ := compact[v1alpha1.HelmRelease](bad); got != bad {
		t.Errorf("a CR that does not convert became %T; want it kept as it came", got)
	}
}

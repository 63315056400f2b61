package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestObjectDigests: a revision's digests trust an object of a newer one
// only when the revision had that object, by ID, with that content.
func TestObjectDigests(t *testing.T) {
	cm := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": "ns"},
			"data":     map[string]any{"key": value},
		}}
	}
	verified := digestsOf([]*unstructured.Unstructured{cm("a", "1"), cm("b", "2"), cm("c", "3")})
	tests := []struct {
		name string
		d    objectDigests
		obj  *unstructured.Unstructured
		want bool
	}{
		{"carried over unchanged", verified, cm("b", "2"), true},
		{"changed", verified, cm("b", "changed"), false},
		{"another object's content", verified, cm("b", "1"), false},
		{"new", verified, cm("d", "1"), false},
		{"other namespace", verified, func() *unstructured.Unstructured { o := cm("a", "1"); o.SetNamespace("other"); return o }(), false},
		{"digests not known", nil, cm("a", "1"), false},
		{"a revision with no objects", digestsOf(nil), cm("a", "1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.has(tt.obj); got != tt.want {
				t.Errorf("has = %v, want %v", got, tt.want)
			}
		})
	}
	if digestsOf(nil) == nil {
		t.Error("digestsOf(nil) is nil, which means not known; want empty")
	}
}

// BenchmarkObjectDigest is what a first sync pays per object to know
// which objects a new revision carries over unchanged.
func BenchmarkObjectDigest(b *testing.B) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "labels": map[string]any{"app": "web", "app.kubernetes.io/managed-by": "Helm"}},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "web", "image": "registry.invalid/web:1", "ports": []any{map[string]any{"containerPort": int64(8080)}}},
		}}}},
	}}
	for b.Loop() {
		objectDigest(obj)
	}
}

package controller

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
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

// TestChartTrust: a revision that changes no object is never seen applied
// by Helm, so its chart, which a Secret writer may have forged, is not
// trusted: it names the verified revision's chart, or the one that names;
// a revision that changes an object is proved by Helm's writes, its own
// chart with it.
func TestChartTrust(t *testing.T) {
	cm := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": "ns"},
			"data":     map[string]any{"key": value},
		}}
	}
	rk := v1alpha1.ReleaseKey{Name: "web", Namespace: "ns"}
	verifiedObjs := []*unstructured.Unstructured{cm("a", "1"), cm("b", "2")}
	tests := []struct {
		name     string
		verified v1alpha1.VerifiedRevision
		objs     []*unstructured.Unstructured
		// applied is whether Helm was seen to apply the revision
		// (engine.Result.Applied) by the time it was verified.
		applied bool
		want    *v1alpha1.ChartRevision
	}{
		{"every object carried over", v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "2")}, true, &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
		{"fewer objects, all carried over", v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"},
			[]*unstructured.Unstructured{cm("a", "1")}, false, &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
		{"the verified one names another's chart", v1alpha1.VerifiedRevision{Release: rk, Revision: 2, ManifestDigest: "d2", Chart: &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "2")}, false, &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
		{"an object changed, and Helm was seen to apply it", v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "changed")}, true, nil},
		{"an object added, and Helm was seen to apply it", v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "2"), cm("c", "3")}, true, nil},
		// The review's forged revision: it restates an object in a
		// form the live one already matches, so it is verified with no
		// write at all. Its chart is never trusted.
		{"an object restated, verified with no write", v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "changed")}, false, &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
		{"the verified one names another's chart, and the next is verified with no write", v1alpha1.VerifiedRevision{Release: rk, Revision: 2, ManifestDigest: "d2", ChartDigest: "c2", Chart: &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
			[]*unstructured.Unstructured{cm("a", "1"), cm("b", "changed")}, false, &v1alpha1.ChartRevision{Revision: 1, ManifestDigest: "d1", ChartDigest: "c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestController(t, helmRelease(nil), nil, nil)
			verified := tt.verified
			st := &releaseState{release: rk}
			st.trust = trust{verified: &verified, objects: digestsOf(verifiedObjs)}
			rel := &storage.Release{Name: rk.Name, Namespace: rk.Namespace, Version: verified.Revision + 1, Manifest: "next"}
			c.verification(context.Background(), st, &metav1.PartialObjectMetadata{}, rel, tt.objs)
			if st.candidate == nil {
				t.Fatal("no candidate revision")
			}
			st.verified(tt.applied)
			if st.trust.verified.Revision != rel.Version || st.trust.verified.ChartDigest != rel.ChartDigest() {
				t.Errorf("verified %+v, want revision %d with its chart digest", st.trust.verified, rel.Version)
			}
			if diff := cmp.Diff(tt.want, st.trust.verified.Chart); diff != "" {
				t.Errorf("verified revision's chart (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFallbacks: an object a new revision changes is held as the verified
// revision has the object it names, however the new manifest spells it: a
// namespace written out or left to the release's, another version of the
// kind, a namespace given to a cluster-scoped kind. Objects it carries
// over, and objects the verified revision did not have, have none.
func TestFallbacks(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "HorizontalPodAutoscaler"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler"}, meta.RESTScopeNamespace)
	obj := func(apiVersion, kind, namespace, name, value string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}, "data": map[string]any{"key": value}}}
		if namespace != "" {
			o.SetNamespace(namespace)
		}
		return o
	}
	verified := []*unstructured.Unstructured{
		obj("v1", "ConfigMap", "", "a", "1"),
		obj("v1", "ConfigMap", "other", "b", "2"),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "c", "3"),
		obj("autoscaling/v1", "HorizontalPodAutoscaler", "", "d", "4"),
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want *unstructured.Unstructured
	}{
		{"namespace written out", obj("v1", "ConfigMap", "rel", "a", "forged"), verified[0]},
		{"namespace left out", obj("v1", "ConfigMap", "", "a", "forged"), verified[0]},
		{"another namespace's object", obj("v1", "ConfigMap", "rel", "b", "forged"), nil},
		{"its own namespace", obj("v1", "ConfigMap", "other", "b", "forged"), verified[1]},
		{"a cluster-scoped kind given a namespace", obj("rbac.authorization.k8s.io/v1", "ClusterRole", "rel", "c", "forged"), verified[2]},
		{"another version of the kind", obj("autoscaling/v2", "HorizontalPodAutoscaler", "rel", "d", "forged"), verified[3]},
		{"another kind of the name", obj("v1", "Secret", "", "a", "forged"), nil},
		{"carried over", obj("v1", "ConfigMap", "", "a", "1"), nil},
		{"new", obj("v1", "ConfigMap", "", "e", "5"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []*unstructured.Unstructured{tt.obj}
			carried := digestsOf(verified)
			fallback := fallbacks(mapper, "rel", verified, objs, func(o *unstructured.Unstructured) bool { return !carried.has(o) })
			if got := fallback(tt.obj); got != tt.want {
				t.Errorf("fallback = %v, want %v", got, tt.want)
			}
		})
	}
}

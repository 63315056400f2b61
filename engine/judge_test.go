package engine

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestJudge: a request is denied exactly where the revert would correct
// what it changed, and only for a set that prevents changes.
func TestJudge(t *testing.T) {
	ctx := context.Background()
	deployGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deployment := &unstructured.Unstructured{Object: obj(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n")}
	newEngine := func(t *testing.T, set ObjectSet) (*Engine, *unstructured.Unstructured) {
		e, client, _ := newTestEngine(t)
		set.Objects = []*unstructured.Unstructured{configMap(t, "declared"), deployment.DeepCopy()}
		set.DefaultNamespace = "ns"
		e.Declare("k", set)
		if _, err := e.Sync(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if set.ReportOnly {
			// A set that only reports creates nothing.
			return e, withNamespace(configMap(t, "declared"), "ns")
		}
		live, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return e, live
	}
	with := func(u *unstructured.Unstructured, change func(map[string]any)) *unstructured.Unstructured {
		c := u.DeepCopy()
		change(c.Object)
		return c
	}
	setKey := func(v string) func(map[string]any) {
		return func(o map[string]any) { o["data"].(map[string]any)["key"] = v }
	}
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	tests := []struct {
		name     string
		set      ObjectSet
		old, obj func(live *unstructured.Unstructured) *unstructured.Unstructured
		want     Judgement
	}{
		{name: "a held field changed", set: ObjectSet{Prevent: true},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("edited")) },
			want: Judgement{Key: "k", Ref: ref, Kind: "ConfigMap", Fields: []DeniedField{{Path: "/data/key", Declared: "declared"}}}},
		{name: "deleted", set: ObjectSet{Prevent: true},
			old: identity, obj: func(*unstructured.Unstructured) *unstructured.Unstructured { return nil },
			want: Judgement{Key: "k", Ref: ref, Kind: "ConfigMap", Deleted: true}},
		{name: "created otherwise", set: ObjectSet{Prevent: true},
			old: func(*unstructured.Unstructured) *unstructured.Unstructured { return nil }, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("mine")) },
			want: Judgement{Key: "k", Ref: ref, Kind: "ConfigMap", Fields: []DeniedField{{Path: "/data/key", Declared: "declared"}}}},
		{name: "a label added", set: ObjectSet{Prevent: true},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured {
				return with(l, func(o map[string]any) { o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "a"} })
			}},
		{name: "a key the declaration does not hold", set: ObjectSet{Prevent: true},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured {
				return with(l, func(o map[string]any) { o["data"].(map[string]any)["other"] = "x" })
			}},
		{name: "an ignored path", set: ObjectSet{Prevent: true, Ignore: func(*unstructured.Unstructured) []Pointer { return []Pointer{{"data", "key"}} }},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("edited")) }},
		{name: "a drift the request leaves as it was", set: ObjectSet{Prevent: true},
			old: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("drifted")) },
			obj: func(l *unstructured.Unstructured) *unstructured.Unstructured {
				return with(l, func(o map[string]any) { setKey("drifted")(o); o["data"].(map[string]any)["other"] = "x" })
			}},
		{name: "a drift put right", set: ObjectSet{Prevent: true},
			old: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("drifted")) }, obj: identity},
		{name: "Enforce", set: ObjectSet{},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("edited")) }},
		{name: "Warn", set: ObjectSet{Prevent: true, ReportOnly: true},
			old: identity, obj: func(l *unstructured.Unstructured) *unstructured.Unstructured { return with(l, setKey("edited")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, live := newEngine(t, tt.set)
			got, err := e.Judge(cmGVR, tt.old(live), tt.obj(live))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Judge (-want +got):\n%s", diff)
			}
			if got.Denied() != (tt.want.Key != "") {
				t.Errorf("Denied() = %v", got.Denied())
			}
		})
	}

	t.Run("scale", func(t *testing.T) {
		e, _ := newEngine(t, ObjectSet{Prevent: true})
		got, err := e.JudgeScale(deployGVR, "ns", "web", 2, 5)
		want := Judgement{Key: "k", Ref: ObjectRef{GVR: deployGVR, Namespace: "ns", Name: "web"}, Kind: "Deployment", Fields: []DeniedField{{Path: "/spec/replicas", Declared: int64(2)}}}
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Errorf("JudgeScale 2 -> 5 = %v (-want +got):\n%s", err, diff)
		}
		if got, _ := e.JudgeScale(deployGVR, "ns", "web", 5, 2); got.Denied() {
			t.Errorf("JudgeScale back to the declared 2 = %+v; want allowed", got)
		}
		e, _ = newEngine(t, ObjectSet{Prevent: true, Ignore: func(*unstructured.Unstructured) []Pointer { return []Pointer{{"spec", "replicas"}} }})
		if got, _ := e.JudgeScale(deployGVR, "ns", "web", 2, 5); got.Denied() {
			t.Errorf("JudgeScale with /spec/replicas ignored = %+v; want allowed", got)
		}
	})
	t.Run("prevented types", func(t *testing.T) {
		e, _ := newEngine(t, ObjectSet{Prevent: true})
		if diff := cmp.Diff([]schema.GroupVersionResource{cmGVR, deployGVR}, e.PreventedTypes()); diff != "" {
			t.Errorf("PreventedTypes (-want +got):\n%s", diff)
		}
		e, _ = newEngine(t, ObjectSet{})
		if got := e.PreventedTypes(); len(got) != 0 {
			t.Errorf("PreventedTypes of an Enforce set = %v; want none", got)
		}
	})
}

func identity(u *unstructured.Unstructured) *unstructured.Unstructured { return u.DeepCopy() }

// BenchmarkJudge is the webhook's decision for a write of a real-chart
// Deployment a Prevent set holds, from the declaration in memory: one that
// changes nothing held (a label) and one that changes the replicas.
func BenchmarkJudge(b *testing.B) {
	ctx := context.Background()
	e, client, _ := newTestEngine(b)
	deployGVR := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{{Object: obj(b, benchDeployment)}}, DefaultNamespace: "ns", Prevent: true})
	if _, err := e.Sync(ctx, "k"); err != nil {
		b.Fatal(err)
	}
	live, err := client.Resource(deployGVR).Namespace("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	labelled := live.DeepCopy()
	labelled.SetLabels(map[string]string{"app": "web", "team": "x"})
	scaled := live.DeepCopy()
	if err := unstructured.SetNestedField(scaled.Object, int64(5), "spec", "replicas"); err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name   string
		obj    *unstructured.Unstructured
		denied bool
	}{{"label", labelled, false}, {"replicas", scaled, true}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				j, err := e.Judge(deployGVR, live, bb.obj)
				if err != nil || j.Denied() != bb.denied {
					b.Fatal(err, j)
				}
			}
		})
	}
}

// newJudgeEngine is an engine whose RESTMapper also knows Secrets and the
// Gizmo custom resource, with set declared under "k" and not synced: Judge
// reads only the declaration.
func newJudgeEngine(t *testing.T, set ObjectSet) *Engine {
	t.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	mapper.Add(gizmoGV.WithKind("Gizmo"), meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	e := New(dynamicfake.NewSimpleDynamicClient(scheme.Scheme), resettable{mapper}, func(string) {}, Options{})
	set.DefaultNamespace, set.Prevent = "ns", true
	e.Declare("k", set)
	return e
}

// TestJudgeSecretRedacted: a denial names the Secret's data keys it would
// change, never their declared values, in data or stringData: RBAC lets
// someone patch a Secret they may not read, and the denial is shown to
// them.
func TestJudgeSecretRedacted(t *testing.T) {
	secretGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	declared := &unstructured.Unstructured{Object: obj(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque\ndata: {password: c2VjcmV0}\nstringData: {token: hunter2}\n")}
	e := newJudgeEngine(t, ObjectSet{Objects: []*unstructured.Unstructured{declared}})
	live := &unstructured.Unstructured{Object: obj(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\ntype: Opaque\ndata: {password: c2VjcmV0, token: aHVudGVyMg==}\n")}
	edited := live.DeepCopy()
	edited.Object["data"] = map[string]any{"password": "b3RoZXI=", "token": "eA=="}
	edited.Object["type"] = "kubernetes.io/basic-auth"
	got, err := e.Judge(secretGVR, live, edited)
	if err != nil {
		t.Fatal(err)
	}
	want := Judgement{Key: "k", Ref: ObjectRef{GVR: secretGVR, Namespace: "ns", Name: "s"}, Kind: "Secret", Fields: []DeniedField{
		{Path: "/data/password", Redacted: true},
		{Path: "/data/token", Redacted: true},
		{Path: "/type", Declared: "Opaque"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Judge of a Secret (-want +got):\n%s", diff)
	}
	for _, p := range []string{"/data", "/stringData/token", "/data/password"} {
		if !secretData(secretGVR, mustPointer(t, p)) {
			t.Errorf("secretData(%s) = false", p)
		}
	}
	if secretData(cmGVR, mustPointer(t, "/data/key")) {
		t.Error("secretData of a ConfigMap's data = true; a ConfigMap's values are shown")
	}
}

func mustPointer(t *testing.T, s string) Pointer {
	t.Helper()
	p, err := ParsePointer(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJudgeScaleCRDPath: the scale subresource of a custom resource is
// judged where its CRD says the replicas are (specReplicasPath), not at
// /spec/replicas; a version without a scale subresource, or a path that
// cannot be read, is not judged.
func TestJudgeScaleCRDPath(t *testing.T) {
	gizmoGVR := gizmoGV.WithResource("gizmos")
	gizmo := &unstructured.Unstructured{Object: obj(t, "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\nspec: {size: 3, replicas: 7}\n")}
	crd := func(path string) *unstructured.Unstructured {
		scale := map[string]any{"specReplicasPath": path, "statusReplicasPath": ".status.size"}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "gizmos.example.com"},
			"spec": map[string]any{"group": "example.com", "versions": []any{
				map[string]any{"name": "v1", "served": true, "subresources": map[string]any{"scale": scale}},
				map[string]any{"name": "v2", "served": true},
			}},
		}}
	}
	ref := ObjectRef{GVR: gizmoGVR, Namespace: "ns", Name: "g"}
	tests := []struct {
		name     string
		crd      *unstructured.Unstructured
		gvr      schema.GroupVersionResource
		old, new int64
		want     Judgement
	}{
		{name: "the CRD's path", crd: crd(".spec.size"), gvr: gizmoGVR, old: 3, new: 5,
			want: Judgement{Key: "k", Ref: ref, Kind: "Gizmo", Fields: []DeniedField{{Path: "/spec/size", Declared: int64(3)}}}},
		{name: "back to the declared value at the CRD's path", crd: crd(".spec.size"), gvr: gizmoGVR, old: 5, new: 3},
		{name: "spec.replicas is not the CRD's path", crd: crd(".spec.size"), gvr: gizmoGVR, old: 3, new: 7,
			want: Judgement{Key: "k", Ref: ref, Kind: "Gizmo", Fields: []DeniedField{{Path: "/spec/size", Declared: int64(3)}}}},
		{name: "a path with array notation is not judged", crd: crd(".spec.sizes[0]"), gvr: gizmoGVR, old: 3, new: 5},
		{name: "CRD not listed yet: /spec/replicas", gvr: gizmoGVR, old: 3, new: 5,
			want: Judgement{Key: "k", Ref: ref, Kind: "Gizmo", Fields: []DeniedField{{Path: "/spec/replicas", Declared: int64(7)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newJudgeEngine(t, ObjectSet{Objects: []*unstructured.Unstructured{gizmo.DeepCopy()}})
			if tt.crd != nil {
				e.scales.seen(tt.crd)
			}
			got, err := e.JudgeScale(tt.gvr, "ns", "g", tt.old, tt.new)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("JudgeScale %d -> %d (-want +got):\n%s", tt.old, tt.new, diff)
			}
		})
	}
	t.Run("a version without a scale subresource", func(t *testing.T) {
		var s scalePaths
		s.seen(crd(".spec.size"))
		if p, ok := s.path(gizmoGV.WithResource("gizmos").GroupResource().WithVersion("v2")); ok {
			t.Errorf("path of v2 = %v, true; want none", p)
		}
		if p, ok := s.path(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}); !ok || p.String() != "/spec/replicas" {
			t.Errorf("path of deployments = %v, %v; want /spec/replicas", p, ok)
		}
	})
}

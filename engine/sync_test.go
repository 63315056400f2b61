package engine

import (
	"context"
	"encoding/json"
	"errors"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"slices"
	"testing"
	"unique"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/helm-locker/helm-locker/informers"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

// resettable makes a static RESTMapper look like a discovery-backed one.
type resettable struct{ meta.RESTMapper }

func (resettable) Reset() {}

var (
	cmGVR   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	roleGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

func newTestEngine(t testing.TB) (*Engine, *dynamicfake.FakeDynamicClient, *[]string) {
	t.Helper()
	return newTestEngineWith(t, Options{})
}

func newTestEngineWith(t testing.TB, opts Options) (*Engine, *dynamicfake.FakeDynamicClient, *[]string) {
	t.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Service"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	client := dynamicfake.NewSimpleDynamicClient(scheme.Scheme)
	var notified []string
	e := New(client, resettable{mapper}, func(key string) { notified = append(notified, key) }, opts)
	// Sync is driven by hand here, with no informer running: objects are
	// read with GETs, and every type counts as watched.
	e.watching = func(schema.GroupVersionResource) bool { return true }
	return e, client, &notified
}

func configMap(t *testing.T, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {key: "+value+"}\n")}
}

// TestSyncStepByStep drives one set through creation, drift, a refused
// write and an unknown kind, one Sync at a time.
func TestSyncStepByStep(t *testing.T) {
	ctx := context.Background()
	e, client, notified := newTestEngine(t)
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	var refuse error
	e.Declare("k", ObjectSet{
		Objects:          []*unstructured.Unstructured{configMap(t, "declared")},
		DefaultNamespace: "ns",
		BeforeWrite:      func(context.Context, Write) error { return refuse },
	})

	// 1. The object does not exist: it is created in the default namespace.
	res, err := e.Sync(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Objects: 1, Locked: 1, InLine: true, Drifts: []Drift{{Ref: ref, Kind: "ConfigMap", Deleted: true, Corrected: true, Applying: true}}}
	if diff := cmp.Diff(want, res, cmpopts.IgnoreFields(Drift{}, "Latency")); diff != "" {
		t.Errorf("first Sync (-want +got):\n%s", diff)
	}

	// 2. Nothing is dirty: nothing is done.
	res, err = e.Sync(ctx, "k")
	if err != nil || len(res.Drifts) != 0 || !res.InLine {
		t.Errorf("idle Sync = %+v, %v; want in line with no action", res, err)
	}

	// 3. An edit arrives as a watch event: the set is notified and the
	// next Sync reverts it.
	edited := drift(t, client, "edited")
	e.onEvent(cmGVR, edited)
	if diff := cmp.Diff([]string{"k"}, *notified); diff != "" {
		t.Errorf("notified keys (-want +got):\n%s", diff)
	}
	res, err = e.Sync(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Drifts) != 1 || !res.Drifts[0].Corrected || res.Drifts[0].Ref != ref {
		t.Errorf("drifts = %+v, want %v corrected", res.Drifts, ref)
	}
	if diff := cmp.Diff([]string{"/data/key"}, res.Drifts[0].Paths); diff != "" {
		t.Errorf("drifted paths (-want +got):\n%s", diff)
	}
	// A caller keeps a drift (as a status's last drift, an event, a
	// metric's label): its kind must not keep the declaration it was read
	// from alive, a whole object per drift (see kindOf).
	if got, want := unsafe.StringData(res.Drifts[0].Kind), unsafe.StringData(unique.Make("ConfigMap").Value()); got != want {
		t.Errorf("the drift's kind is not the shared copy of %q: it keeps the declaration read back alive", res.Drifts[0].Kind)
	}
	if got := value(t, client); got != "declared" {
		t.Errorf("after revert data.key = %q, want declared", got)
	}

	// 4. A write the caller refuses leaves the object dirty and out of
	// line, and is retried by the next Sync.
	e.onEvent(cmGVR, drift(t, client, "edited again"))
	refuse = errors.New("release is being upgraded")
	res, err = e.Sync(ctx, "k")
	if !errors.Is(err, refuse) || res.InLine {
		t.Fatalf("refused Sync = %+v, %v; want the refusal and not in line", res, err)
	}
	refuse = nil
	res, err = e.Sync(ctx, "k")
	if err != nil || !res.InLine || value(t, client) != "declared" {
		t.Errorf("retried Sync = %+v, %v, value %q; want in line and declared", res, err, value(t, client))
	}

	// 5. Forgetting the set leaves the object alone.
	e.Forget("k")
	drift(t, client, "left alone")
	e.onEvent(cmGVR, edited)
	if res, err := e.Sync(ctx, "k"); err != nil || res.Objects != 0 {
		t.Errorf("Sync after Forget = %+v, %v; want empty", res, err)
	}
	if got := value(t, client); got != "left alone" {
		t.Errorf("after Forget data.key = %q, want left alone", got)
	}
}

func TestDeclareResolvesScopeAndUnknownKinds(t *testing.T) {
	e, _, _ := newTestEngine(t)
	role := &unstructured.Unstructured{Object: obj(t, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r, namespace: ns}\n")}
	widget := &unstructured.Unstructured{Object: obj(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{role, widget, configMap(t, "x")}, DefaultNamespace: "ns"})
	s := e.sets["k"]
	var refs []ObjectRef
	for _, o := range s.objects {
		refs = append(refs, o.ref())
	}
	want := map[ObjectRef]bool{{GVR: roleGVR, Name: "r"}: true, {GVR: cmGVR, Namespace: "ns", Name: "c"}: true}
	if len(refs) != 2 || !want[refs[0]] || !want[refs[1]] {
		t.Errorf("resolved objects = %v, want the ClusterRole without namespace and the ConfigMap in ns", refs)
	}
	if len(s.unresolved) != 1 {
		t.Fatalf("unresolved = %d, want the Widget", len(s.unresolved))
	}
	var typeErr *TypeError
	if !errors.As(s.unresolved[0].err, &typeErr) || typeErr.Kind.Kind != "Widget" {
		t.Errorf("unresolved error = %v, want a TypeError for Widget", s.unresolved[0].err)
	}
	if !e.tracked(cmGVR, "ns", "c") || e.tracked(cmGVR, "ns", "other") {
		t.Error("tracked() must hold exactly the declared objects")
	}
}

// mergeConfigMap applies a JSON merge patch to a ConfigMap, as the API
// server does.
func mergeConfigMap(current runtime.Object, patch []byte) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(current)
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(data, patch)
	if err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{}
	return out, out.UnmarshalJSON(merged)
}

func drift(t *testing.T, client *dynamicfake.FakeDynamicClient, v string) *unstructured.Unstructured {
	t.Helper()
	out, err := client.Resource(cmGVR).Namespace("ns").Patch(context.Background(), "c", types.MergePatchType, []byte(`{"data":{"key":"`+v+`"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func value(t *testing.T, client *dynamicfake.FakeDynamicClient) string {
	t.Helper()
	got, err := client.Resource(cmGVR).Namespace("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := unstructured.NestedString(got.Object, "data", "key")
	return v
}

// TestUnwatchedTypes: while a type's informer does not see changes as they
// happen, a set with objects of that type is not in line, says which types
// are blind, and is notified when that changes.
func TestUnwatchedTypes(t *testing.T) {
	ctx := context.Background()
	e, _, notified := newTestEngine(t)
	blind := map[schema.GroupVersionResource]bool{cmGVR: true}
	e.watching = func(gvr schema.GroupVersionResource) bool { return !blind[gvr] }
	e.Declare("cms", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
	e.Declare("roles", ObjectSet{Objects: []*unstructured.Unstructured{{Object: obj(t, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n")}}})

	res, err := e.Sync(ctx, "cms")
	if err != nil {
		t.Fatal(err)
	}
	if res.InLine || !slices.Equal(res.Unwatched, []schema.GroupVersionResource{cmGVR}) || res.Locked != 1 {
		t.Errorf("Sync with configmaps unwatched = %+v; want the object checked, the set not in line, configmaps unwatched", res)
	}
	if res, _ := e.Sync(ctx, "roles"); !res.InLine || len(res.Unwatched) != 0 {
		t.Errorf("Sync of a set of another type = %+v; want it in line", res)
	}

	*notified = nil
	blind[cmGVR] = false
	e.healthChanged(cmGVR, true)
	if !slices.Equal(*notified, []string{"cms"}) {
		t.Errorf("notified %v when configmaps were watched again, want [cms]", *notified)
	}
	if res, _ := e.Sync(ctx, "cms"); !res.InLine || len(res.Unwatched) != 0 {
		t.Errorf("Sync once watched again = %+v; want in line", res)
	}
}

// TestAggregatedClusterRoleRulesAreLeftToTheirController: the rules of a
// ClusterRole with an aggregationRule are the aggregation controller's; the
// lock holds the rest.
func TestAggregatedClusterRoleRulesAreLeftToTheirController(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	const declared = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: view-extra, labels: {app: x}}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {rbac.example.com/aggregate-to-view: "true"}}]
rules: []`
	live := &unstructured.Unstructured{Object: obj(t, declared)}
	live.Object["rules"] = []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get"}}}
	if err := client.Tracker().Create(roleGVR, live, ""); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{{Object: obj(t, declared)}}})
	res, err := e.Sync(ctx, "k")
	if err != nil || !res.InLine || len(res.Drifts) != 0 {
		t.Fatalf("Sync = %+v, %v; want in line with the aggregated rules left alone", res, err)
	}
	// A change of what the lock does hold is still drift.
	live.SetLabels(map[string]string{"app": "edited"})
	if err := client.Tracker().Update(roleGVR, live, ""); err != nil {
		t.Fatal(err)
	}
	e.onEvent(roleGVR, live)
	if res, err := e.Sync(ctx, "k"); err != nil || len(res.Drifts) != 1 || !slices.Equal(res.Drifts[0].Paths, []string{"/metadata/labels/app"}) {
		t.Fatalf("Sync after a label edit = %+v, %v; want one drift at /metadata/labels/app", res, err)
	}
}

// TestFinishedJobWithTTLIsNotRecreated: a finished Job that its TTL deletes
// stays deleted; recreating it would run it again each time.
func TestFinishedJobWithTTLIsNotRecreated(t *testing.T) {
	ctx := context.Background()
	jobGVR := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, meta.RESTScopeNamespace)
	client := dynamicfake.NewSimpleDynamicClient(scheme.Scheme)
	e := New(client, resettable{mapper}, func(string) {}, Options{})
	e.watching = func(schema.GroupVersionResource) bool { return true }
	const job = `
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: ns}
spec:
  ttlSecondsAfterFinished: 60
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: "migrate:1"}]`
	live := &unstructured.Unstructured{Object: obj(t, job)}
	live.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}
	if err := client.Tracker().Create(jobGVR, live, "ns"); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{{Object: obj(t, job)}}})
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine {
		t.Fatalf("first Sync = %+v, %v; want in line", res, err)
	}
	if err := client.Tracker().Delete(jobGVR, "ns", "migrate"); err != nil {
		t.Fatal(err)
	}
	e.onEvent(jobGVR, live)
	res, err := e.Sync(ctx, "k")
	if err != nil || !res.InLine || len(res.Drifts) != 0 || len(res.Finished) != 1 || res.Locked != 0 {
		t.Fatalf("Sync after the TTL deleted it = %+v, %v; want it reported Finished, not recreated", res, err)
	}
	if _, err := client.Resource(jobGVR).Namespace("ns").Get(ctx, "migrate", metav1.GetOptions{}); err == nil {
		t.Error("the finished Job was recreated")
	}
}

// TestHeldMetadataIsWhatTheMergeKeeps: the labels and annotations the
// engine tells the informers it holds are the declared ones, and a live
// object that has others besides is in line, so the informers may skip
// changes to those alone. A change to a declared one is drift.
func TestHeldMetadataIsWhatTheMergeKeeps(t *testing.T) {
	e, _, _ := newTestEngine(t)
	declared := &unstructured.Unstructured{Object: obj(t, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: c
  labels: {app.kubernetes.io/name: web, helm.sh/chart: web-1.0.0}
  annotations: {checksum/config: abc}
data: {key: declared}
`)}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{declared}, DefaultNamespace: "ns"})

	got := e.heldMetadata(cmGVR, "ns", "c")
	want := informers.NewHeldMetadata([]string{"helm.sh/chart", "app.kubernetes.io/name"}, []string{"checksum/config"})
	if got == nil || *got != want {
		t.Errorf("heldMetadata = %+v, want %+v", got, want)
	}
	if got := e.heldMetadata(cmGVR, "ns", "other"); got != nil {
		t.Errorf("heldMetadata of an object no set declares = %+v, want nil: all held", got)
	}

	live := func(edit func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := declared.DeepCopy()
		u.SetNamespace("ns")
		u.SetResourceVersion("7")
		edit(u)
		return u
	}
	tests := []struct {
		name   string
		edit   func(u *unstructured.Unstructured)
		inLine bool
	}{
		{"as declared", func(*unstructured.Unstructured) {}, true},
		{"a label and an annotation of another controller", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"app.kubernetes.io/name": "web", "helm.sh/chart": "web-1.0.0", "team": "x"})
			u.SetAnnotations(map[string]string{"checksum/config": "abc", "deployment.kubernetes.io/revision": "3"})
		}, true},
		{"a declared label changed", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"app.kubernetes.io/name": "other", "helm.sh/chart": "web-1.0.0"})
		}, false},
		{"a declared annotation removed", func(u *unstructured.Unstructured) { u.SetAnnotations(nil) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stub := e.store(cmGVR, live(tt.edit)).(*inLineStub)
			if stub != tt.inLine {
				t.Errorf("stored as in line = %v, want %v", stub, tt.inLine)
			}
		})
	}
}

package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestPausedSetKeepsItsObjects: a paused set, as a HelmRelease's while Helm
// upgrades the release, keeps the object it holds from the next set in
// line: that one stays in Conflict and writes nothing, while the owner
// changes the object. The paused set checks, writes and denies nothing, and
// keeps its type in PreventedTypes. Declaring it again ends the pause; once
// its declaration drops the object, the next in line takes it over.
func TestPausedSetKeepsItsObjects(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e, client, notified := newTestEngine(t)
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	declareRelease := func(objs ...*unstructured.Unstructured) {
		e.Declare("release", ObjectSet{Objects: objs, DefaultNamespace: "ns", Since: t0, Prevent: true})
	}
	sync := func(key string) Result {
		t.Helper()
		res, err := e.Sync(ctx, key)
		if err != nil {
			t.Fatalf("Sync(%s): %v", key, err)
		}
		return res
	}
	value := func() string {
		t.Helper()
		live, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(live.Object, "data", "key")
		return v
	}
	// helmWrites changes the object as its owner would, and delivers the
	// watch event.
	helmWrites := func(v string) *unstructured.Unstructured {
		t.Helper()
		live, err := client.Resource(cmGVR).Namespace("ns").Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"key":"`+v+`"}}`), metav1.PatchOptions{FieldManager: "helm"})
		if err != nil {
			t.Fatal(err)
		}
		e.onEvent(cmGVR, live)
		return live
	}
	conflict := Result{Conflicts: []Conflict{{Ref: ref, Kind: "ConfigMap", Holder: "release"}}}

	declareRelease(configMap(t, "v1"))
	sync("release")
	e.Declare("manifest", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "manifest")}, DefaultNamespace: "ns", Since: t0.Add(time.Second)})
	if diff := cmp.Diff(conflict, sync("manifest")); diff != "" {
		t.Fatalf("Sync of the later set before the pause (-want +got):\n%s", diff)
	}

	// Helm starts an upgrade: the release's set pauses.
	*notified = nil
	before := writes(client)
	e.Pause("release")
	live := helmWrites("v2")
	if len(*notified) != 0 {
		t.Errorf("the pause and the owner's write notified %q; want no set: the paused one checks nothing, and the other does not hold the object", *notified)
	}
	if diff := cmp.Diff(Result{Paused: true}, sync("release")); diff != "" {
		t.Errorf("Sync of the paused set (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(conflict, sync("manifest")); diff != "" {
		t.Errorf("Sync of the later set while the holder is paused (-want +got):\n%s", diff)
	}
	if n := writes(client) - before; n != 0 {
		t.Errorf("%d writes while the holder was paused; want none", n)
	}
	if v := value(); v != "v2" {
		t.Errorf("data.key = %q while the holder is paused; want the owner's v2", v)
	}
	edited := withNamespace(configMap(t, "edited"), "ns")
	if j, err := e.Judge(cmGVR, live, edited); err != nil || j.Denied() {
		t.Errorf("Judge while paused = %+v, %v; want allowed: the owner is changing the object", j, err)
	}
	if e.Prevents(ref) {
		t.Error("Prevents while paused = true; want false")
	}
	if diff := cmp.Diff([]schema.GroupVersionResource{cmGVR}, e.PreventedTypes()); diff != "" {
		t.Errorf("PreventedTypes while paused (-want +got):\n%s", diff)
	}

	// The upgrade is deployed: the new declaration ends the pause, and
	// finds the object as the owner left it.
	declareRelease(configMap(t, "v2"))
	if res := sync("release"); !res.InLine || res.Locked != 1 || res.Paused {
		t.Errorf("Sync of the release declared again: %+v; want the object locked", res)
	}
	if n := writes(client) - before; n != 0 {
		t.Errorf("%d writes after the upgrade; want none: the object is as declared", n)
	}
	if j, err := e.Judge(cmGVR, live, edited); err != nil || !j.Denied() {
		t.Errorf("Judge once declared again = %+v, %v; want denied", j, err)
	}

	// Paused again, and then declared without the object: the later set
	// takes it over.
	e.Pause("release")
	*notified = nil
	other := configMap(t, "v3")
	other.SetName("other")
	declareRelease(other)
	if diff := cmp.Diff([]string{"manifest"}, *notified); diff != "" {
		t.Errorf("sets notified when the holder stopped declaring the object (-want +got):\n%s", diff)
	}
	if res := sync("manifest"); len(res.Conflicts) != 0 || res.Locked != 1 {
		t.Errorf("Sync of the later set after the takeover: %+v; want the object locked and no conflict", res)
	}
	if v := value(); v != "manifest" {
		t.Errorf("data.key = %q after the takeover; want manifest", v)
	}
}

// TestPauseThenForgetHandsOver: Forget of a paused set lets its objects go
// to the next set in line at once.
func TestPauseThenForgetHandsOver(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e, _, notified := newTestEngine(t)
	e.Declare("first", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "first")}, DefaultNamespace: "ns", Since: t0})
	e.Declare("later", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "later")}, DefaultNamespace: "ns", Since: t0.Add(time.Second)})
	if !e.Pause("first") {
		t.Error("Pause of a declared set = false; want true")
	}
	if e.Pause("unknown") {
		t.Error("Pause of a key that holds no set = true; want false")
	}
	*notified = nil
	e.Forget("first")
	if diff := cmp.Diff([]string{"later"}, *notified); diff != "" {
		t.Errorf("sets notified when the paused holder was forgotten (-want +got):\n%s", diff)
	}
	if got := e.holder(ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}); got != "later" {
		t.Errorf("holder = %q; want later", got)
	}
}

package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestOneObjectOneSet: of two sets that declare one object, the one whose
// lock began first holds it, whichever is declared first; the other
// reports a Conflict naming it and writes nothing, and takes the object
// over when the holder forgets it.
func TestOneObjectOneSet(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e, client, notified := newTestEngine(t)
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	declare := func(key, value string, since time.Time) {
		e.Declare(key, ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, value)}, DefaultNamespace: "ns", Since: since})
	}
	value := func() string {
		live, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(live.Object, "data", "key")
		return v
	}

	// "later" is declared first, but "first" began before it.
	declare("later", "later", t0.Add(time.Second))
	declare("first", "first", t0)
	if !slices.Contains(*notified, "later") {
		t.Errorf("the set that lost the object was not told: notified %q", *notified)
	}
	res, err := e.Sync(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Conflicts: []Conflict{{Ref: ref, Kind: "ConfigMap", Holder: "first"}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Sync of the set that does not hold the object (-want +got):\n%s", diff)
	}
	if n := writes(client); n != 0 {
		t.Errorf("the set that does not hold the object made %d writes; want none", n)
	}
	if _, err := e.Sync(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if v := value(); v != "first" {
		t.Fatalf("data.key = %q; want the holder's value, first", v)
	}

	// An event for the object syncs the holder alone.
	*notified = nil
	live, _ := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
	e.onEvent(cmGVR, live)
	if diff := cmp.Diff([]string{"first"}, *notified); diff != "" {
		t.Errorf("sets notified of the object's event (-want +got):\n%s", diff)
	}

	// A new declaration of the holder keeps it the holder.
	declare("first", "first again", time.Time{})
	if _, err := e.Sync(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if v := value(); v != "first again" {
		t.Fatalf("data.key = %q after the holder's new declaration; want first again", v)
	}

	// The holder lets go; the next in line takes over, with one write.
	*notified = nil
	before := writes(client)
	e.Forget("first")
	if diff := cmp.Diff([]string{"later"}, *notified); diff != "" {
		t.Errorf("sets notified when the holder forgot the object (-want +got):\n%s", diff)
	}
	res, err = e.Sync(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) != 0 || res.Locked != 1 || !res.InLine {
		t.Errorf("after the takeover: %+v; want the object locked and no conflict", res)
	}
	if v := value(); v != "later" {
		t.Errorf("data.key = %q after the takeover; want later", v)
	}
	if n := writes(client) - before; n != 1 {
		t.Errorf("the takeover made %d writes; want 1", n)
	}
}

// TestSameSinceGoesToTheFirstDeclared: equal Since (creation timestamps
// are to the second) leave the object with the set declared first, also
// when that set declares anew.
func TestSameSinceGoesToTheFirstDeclared(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e, _, _ := newTestEngine(t)
	for _, key := range []string{"z", "a", "z"} {
		e.Declare(key, ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, key)}, DefaultNamespace: "ns", Since: t0})
	}
	if got := e.holder(ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}); got != "z" {
		t.Errorf("holder = %q; want z, declared first", got)
	}
}

// TestApplyingIsTheSetsOwnChange: the first correction of an object under a
// new or changed declaration is Applying; an unchanged object declared
// anew, and every later correction, are not.
func TestApplyingIsTheSetsOwnChange(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	cm := func(name, value string) *unstructured.Unstructured {
		u := configMap(t, value)
		u.SetName(name)
		return u
	}
	applying := func(res Result) map[string]bool {
		out := map[string]bool{}
		for _, d := range res.Drifts {
			out[d.Ref.Name] = d.Applying
		}
		return out
	}
	sync := func() Result {
		t.Helper()
		res, err := e.Sync(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{cm("a", "one"), cm("b", "one")}, DefaultNamespace: "ns"})
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true}, applying(sync())); diff != "" {
		t.Errorf("Lock: Applying of each drift (-want +got):\n%s", diff)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{cm("a", "two"), cm("b", "one")}, DefaultNamespace: "ns"})
	if diff := cmp.Diff(map[string]bool{"a": true}, applying(sync())); diff != "" {
		t.Errorf("Update: Applying of each drift (-want +got):\n%s", diff)
	}
	edited, err := client.Resource(cmGVR).Namespace("ns").Patch(ctx, "b", types.MergePatchType, []byte(`{"data":{"key":"edited"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, edited)
	if diff := cmp.Diff(map[string]bool{"b": false}, applying(sync())); diff != "" {
		t.Errorf("another's edit: Applying of each drift (-want +got):\n%s", diff)
	}

	// A declaration applied before, by an earlier process: a difference
	// found now is someone else's.
	edited, err = client.Resource(cmGVR).Namespace("ns").Patch(ctx, "a", types.MergePatchType, []byte(`{"data":{"key":"edited"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.Forget("k")
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{cm("a", "two"), cm("b", "one")}, DefaultNamespace: "ns", Applied: true})
	if diff := cmp.Diff(map[string]bool{"a": false}, applying(sync())); diff != "" {
		t.Errorf("a restart: Applying of each drift (-want +got):\n%s", diff)
	}
}

// TestPrecedenceBeforeSince: a set of higher Precedence holds an object
// another declared first, and Judge judges for it alone: a tenant's lock,
// created before an admin's, cannot keep the admin's object from them.
func TestPrecedenceBeforeSince(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e, _, _ := newTestEngine(t)
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	e.Declare("tenant", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "tenant")}, DefaultNamespace: "ns", Since: t0, Precedence: -1, Prevent: true})
	e.Declare("admin", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "admin")}, DefaultNamespace: "ns", Since: t0.Add(time.Hour)})
	res, err := e.Sync(ctx, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Conflict{{Ref: ref, Kind: "ConfigMap", Holder: "admin"}}, res.Conflicts); diff != "" {
		t.Errorf("conflicts of the lower set, created first (-want +got):\n%s", diff)
	}
	live := withNamespace(configMap(t, "admin"), "ns")
	edited := withNamespace(configMap(t, "edited"), "ns")
	if j, err := e.Judge(cmGVR, live, edited); err != nil || j.Denied() {
		t.Errorf("Judge = %+v, %v; want allowed: the holder does not prevent changes, and the tenant's set does not hold the object", j, err)
	}

	// Of equal Precedence, Since decides again.
	e.Declare("tenant", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "tenant")}, DefaultNamespace: "ns", Since: t0, Prevent: true})
	if got := e.holder(ref); got != "tenant" {
		t.Errorf("holder at equal Precedence = %q; want tenant, created first", got)
	}
}

package engine

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// writes counts the patches and creates the engine sent (under its field
// manager), leaving out the test's own.
func writes(client *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case clienttesting.PatchActionImpl:
			if a.PatchOptions.FieldManager == DefaultFieldManager && len(a.PatchOptions.DryRun) == 0 {
				n++
			}
		case clienttesting.CreateActionImpl:
			if a.CreateOptions.FieldManager == DefaultFieldManager {
				n++
			}
		}
	}
	return n
}

// TestFightBacksOff drives an actor that rewrites a locked field after
// every correction: past the threshold the engine holds corrections back,
// doubling the wait up to the cap, so its writes stay bounded.
func TestFightBacksOff(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.opts = withDefaults(Options{Now: clock.now})
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
	if _, err := e.Sync(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	// The creation above was a correction too; let it leave the window.
	clock.advance(2 * DefaultFightWindow)
	base := writes(client)
	fightOnce := func() Result {
		t.Helper()
		e.onEvent(cmGVR, drift(t, client, "theirs"))
		res, err := e.Sync(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// Up to the threshold, every drift is corrected at once.
	for i := range DefaultFightThreshold {
		clock.advance(time.Second)
		if res := fightOnce(); len(res.Drifts) != 1 || !res.Drifts[0].Corrected || len(res.Fights) != 0 {
			t.Fatalf("drift %d: %+v, want corrected and no fight", i+1, res)
		}
	}
	// One more within the minute is corrected, and starts the fight.
	clock.advance(time.Second)
	res := fightOnce()
	if len(res.Fights) != 1 || res.RequeueAfter != DefaultFightBackoff {
		t.Fatalf("drift %d: fights %+v, requeue %v; want one fight and a requeue after %v", DefaultFightThreshold+1, res.Fights, res.RequeueAfter, DefaultFightBackoff)
	}
	// While held, drifts are not written back, however many arrive.
	for range 50 {
		clock.advance(100 * time.Millisecond)
		if res := fightOnce(); len(res.Drifts) != 1 || res.Drifts[0].Corrected || !res.Drifts[0].Held || res.Drifted != 1 {
			t.Fatalf("held drift: %+v, want held, not corrected, and counted as drifted", res)
		}
	}
	if got := writes(client) - base; got != DefaultFightThreshold+1 {
		t.Errorf("writes during the first hold = %d, want %d", got, DefaultFightThreshold+1)
	}
	// Each hold that ends allows one correction, and doubles the next
	// wait up to the cap.
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i, backoff := range want {
		clock.advance(res.Fights[0].Until.Sub(clock.now()))
		res = fightOnce()
		if len(res.Fights) != 1 || res.RequeueAfter != backoff {
			t.Fatalf("hold %d: fights %+v, requeue %v; want a hold of %v", i+2, res.Fights, res.RequeueAfter, backoff)
		}
	}
	if got := writes(client) - base; got != DefaultFightThreshold+1+len(want) {
		t.Errorf("writes = %d, want %d: one per ended hold", got, DefaultFightThreshold+1+len(want))
	}

	// Once the object is back in line and left alone, the fight is no
	// longer reported, though its backoff lasts.
	e.onEvent(cmGVR, drift(t, client, "declared"))
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Fights) != 0 {
		t.Errorf("Sync of the object back in line during the backoff = %+v, %v; want in line and no fight", res, err)
	}
	// When the other actor stops for longer than the window, the next
	// drift is corrected at once again.
	clock.advance(res.Fights[0].Until.Sub(clock.now()) + 2*DefaultFightWindow)
	if res := fightOnce(); len(res.Drifts) != 1 || !res.Drifts[0].Corrected || len(res.Fights) != 0 {
		t.Errorf("drift after the fight: %+v, want corrected and no fight", res)
	}
}

// TestReportOnlyNeverWrites checks Warn mode: drift and deletion are
// reported once per version, and nothing is written.
func TestReportOnlyNeverWrites(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, withNamespace(configMap(t, "declared"), "ns"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns", ReportOnly: true})
	base := writes(client)
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Drifts) != 0 {
		t.Fatalf("first Sync = %+v, %v; want in line", res, err)
	}
	e.onEvent(cmGVR, drift(t, client, "theirs"))
	res, err := e.Sync(ctx, "k")
	if err != nil || res.InLine || res.Drifted != 1 || len(res.Drifts) != 1 || res.Drifts[0].Corrected || res.Drifts[0].Held {
		t.Fatalf("Sync after drift = %+v, %v; want one reported, uncorrected drift", res, err)
	}
	// The same version is not reported twice.
	e.onEvent(cmGVR, withNamespace(configMap(t, "theirs"), "ns"))
	if res, _ := e.Sync(ctx, "k"); len(res.Drifts) == 1 && !res.Drifts[0].Held {
		t.Errorf("second Sync reported the same drift again: %+v", res.Drifts)
	}
	// A deletion is reported, not undone.
	if err := client.Resource(cmGVR).Namespace("ns").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, withNamespace(configMap(t, "gone"), "ns"))
	res, _ = e.Sync(ctx, "k")
	if len(res.Drifts) != 1 || !res.Drifts[0].Deleted || res.Drifts[0].Corrected {
		t.Errorf("Sync after delete = %+v, want a reported deletion", res.Drifts)
	}
	if got := writes(client) - base; got != 0 {
		t.Errorf("ReportOnly wrote %d times, want 0", got)
	}
	if _, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{}); err == nil {
		t.Error("ReportOnly recreated the deleted object")
	}
}

// TestIgnoredFieldsKeepTheirLiveValue checks that an ignored field is
// neither compared nor reverted, while the rest still is.
func TestIgnoredFieldsKeepTheirLiveValue(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	declared := &unstructured.Unstructured{Object: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {key: declared, scale: '1'}\n")}
	if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, withNamespace(declared, "ns"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale, err := ParsePointer("/data/scale")
	if err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{declared}, DefaultNamespace: "ns",
		Ignore: func(*unstructured.Unstructured) []Pointer { return []Pointer{scale} }})
	if _, err := e.Sync(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	base := writes(client)
	scaled, err := client.Resource(cmGVR).Namespace("ns").Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"scale":"5"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, scaled)
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Drifts) != 0 || writes(client) != base {
		t.Fatalf("Sync after an ignored change = %+v, %v; want in line with no write", res, err)
	}
	e.onEvent(cmGVR, drift(t, client, "theirs"))
	res, err := e.Sync(ctx, "k")
	if err != nil || len(res.Drifts) != 1 || !res.Drifts[0].Corrected {
		t.Fatalf("Sync after a locked change = %+v, %v; want it corrected", res, err)
	}
	got, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedStringMap(got.Object, "data")
	if data["key"] != "declared" || data["scale"] != "5" {
		t.Errorf("data = %v, want key reverted and the ignored scale kept at 5", data)
	}
}

func withNamespace(u *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	c := u.DeepCopy()
	c.SetNamespace(ns)
	return c
}

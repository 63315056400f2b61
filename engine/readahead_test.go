package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestReadAhead: sets whose objects their synced caches do not hold (they
// were declared after their informers listed) read them with one list per
// type and namespace, not a GET each, and a list keeps what it returns of
// other sets' objects for their syncs; what a list lacks is created. A
// list stops at its budget and leaves what it did not settle to a GET; a
// type and namespace with few objects missing is read one by one; a set
// that took its objects after a list began is not served by it.
func TestReadAhead(t *testing.T) {
	cm := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": "ns"}, "data": map[string]any{"key": value}}}
	}
	tests := []struct {
		name     string
		declared int // ConfigMaps each set declares
		existing int // of them, those that exist
		others   int // ConfigMaps no set holds, in the same namespace
		sets     int // sets declared, then synced in turn
		// late declares the second set after the first has synced.
		late bool
		// event delivers an event of one of the second set's objects
		// after the first set's sync.
		event bool
		want  []map[string]int // requests of each set's sync
	}{
		{name: "all exist", declared: 6, existing: 6, sets: 1, want: []map[string]int{{"list": 1}}},
		{name: "two to create", declared: 6, existing: 4, sets: 1, want: []map[string]int{{"list": 1, "create": 2}}},
		{name: "few missing", declared: 3, existing: 3, sets: 1, want: []map[string]int{{"get": 3}}},
		// The namespace holds 600 more, which come first by name: a
		// page of 500, then the next, which settles the set within
		// its budget of 640 (16 an object).
		{name: "a crowded namespace", declared: 40, existing: 40, others: 600, sets: 1, want: []map[string]int{{"list": 2}}},
		// For 6 objects, the budget is one page, spent before the
		// set's objects come.
		{name: "past the budget", declared: 6, existing: 6, others: 600, sets: 1, want: []map[string]int{{"list": 1, "get": 6}}},
		{name: "the next sets take the first one's list", declared: 6, existing: 6, sets: 3, want: []map[string]int{{"list": 1}, {}, {}}},
		// The first list found the second set's objects missing: what
		// it lacks is not taken as not existing.
		{name: "a list does not create for others", declared: 6, existing: 4, sets: 2, want: []map[string]int{{"list": 1, "create": 2}, {"list": 1, "create": 2}}},
		{name: "declared after the list", declared: 6, existing: 6, sets: 2, late: true, want: []map[string]int{{"list": 1}, {"list": 1}}},
		{name: "an event makes the cache newer", declared: 6, existing: 6, sets: 2, event: true, want: []map[string]int{{"list": 1}, {"list": 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngine(t)
			e.cached = func(schema.GroupVersionResource, string, string) (any, bool, bool, error) {
				return nil, false, true, nil
			}
			declared := make([][]*unstructured.Unstructured, tt.sets)
			for set := range tt.sets {
				for i := range tt.declared {
					obj := cm(fmt.Sprintf("z-%d-%d", set, i), "declared")
					declared[set] = append(declared[set], obj)
					if i < tt.existing {
						if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, obj.DeepCopy(), metav1.CreateOptions{}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for i := range tt.others {
				if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, cm(fmt.Sprintf("a-%04d", i), "other"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			client.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				// The fake ignores Limit and Continue: page as the
				// API server does, the token being the next offset.
				opts := a.(clienttesting.ListActionImpl).ListOptions
				all, err := client.Tracker().List(cmGVR, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "ns")
				if err != nil {
					return true, nil, err
				}
				list := all.(*unstructured.UnstructuredList)
				slices.SortFunc(list.Items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
				from, _ := strconv.Atoi(opts.Continue)
				list.Items = list.Items[from:]
				if opts.Limit > 0 && int64(len(list.Items)) > opts.Limit {
					list.Items = list.Items[:opts.Limit]
					list.SetContinue(strconv.Itoa(from + int(opts.Limit)))
				}
				return true, list, nil
			})
			key := func(set int) string { return fmt.Sprintf("k%d", set) }
			for set := range tt.sets {
				if !tt.late || set == 0 {
					e.Declare(key(set), ObjectSet{Objects: declared[set], DefaultNamespace: "ns"})
				}
			}
			for set := range tt.sets {
				if tt.late && set > 0 {
					e.Declare(key(set), ObjectSet{Objects: declared[set], DefaultNamespace: "ns"})
				}
				if tt.event && set == 1 {
					e.onEvent(cmGVR, cm("z-1-0", "declared"))
				}
				client.ClearActions()
				res, err := e.Sync(ctx, key(set))
				if err != nil || !res.InLine {
					t.Fatalf("Sync of set %d = %+v, %v; want in line", set, res, err)
				}
				got := map[string]int{}
				for _, a := range client.Actions() {
					got[a.GetVerb()]++
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want[set]) {
					t.Errorf("set %d: requests %v, want %v", set, got, tt.want[set])
				}
			}
		})
	}
}

// TestListingsExpire: a listing that no sync takes and no event empties
// lets go of its objects after its time, not when the next sync of its
// namespace happens to come.
func TestListingsExpire(t *testing.T) {
	ls := &listings{ttl: 10 * time.Millisecond}
	tn := typeNamespace{gvr: cmGVR, namespace: "ns"}
	ls.keep(tn, listing{byName: map[string]*unstructured.Unstructured{"cm": {}}})
	if ls.n.Load() != 1 {
		t.Fatalf("%d listings kept, want 1", ls.n.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for ls.n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the listing was still kept 5 s after its time of 10 ms")
		}
		time.Sleep(time.Millisecond)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.by) != 0 {
		t.Errorf("listings %v, want none", ls.by)
	}
}

// TestRelistDeclaredTogether: sets declared together after their types'
// informers listed find their objects in the caches once Relist returns,
// with one list of each type for all of them and no read of an object
// alone, and their Syncs then read nothing. Sets of types no set held
// before (whose merge rules were not read yet) are resolved by Relist, and
// their informers' first lists find them. A Relist of sets whose objects
// the caches hold lists nothing.
func TestRelistDeclaredTogether(t *testing.T) {
	for _, listedBefore := range []bool{true, false} {
		t.Run(fmt.Sprintf("listed before %t", listedBefore), func(t *testing.T) {
			var existing []runtime.Object
			for _, ns := range []string{"a", "b", "c"} {
				for _, name := range []string{"held-1", "held-2", "other"} {
					existing = append(existing, declaredCM(ns, name))
				}
			}
			e, client := configMapEngine(existing...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if listedBefore {
				e.Declare("first", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("a", "held-1")}})
				e.Prepare(ctx)
			}
			go func() { _ = e.Run(ctx) }()
			if !e.WaitForSynced(ctx) {
				t.Fatal("the informers did not sync")
			}

			keys := []string{"k-a", "k-b", "k-c"}
			for i, ns := range []string{"a", "b", "c"} {
				objs := []*unstructured.Unstructured{declaredCM(ns, "held-2")}
				if ns != "a" || !listedBefore {
					objs = append(objs, declaredCM(ns, "held-1"))
				}
				e.Declare(keys[i], ObjectSet{Objects: objs})
			}
			if _, exists, _, _ := e.cached(cmGVR, "b", "held-1"); exists {
				t.Fatal("an object declared after its informer listed is in its cache")
			}
			client.ClearActions()
			e.Relist(ctx, keys)
			if !e.WaitForSynced(ctx) {
				t.Fatal("the informers did not sync")
			}
			// Of ConfigMaps: the CRD informer's first list and watch,
			// and the ConfigMap informer's watch after its list, may
			// come after ClearActions on a busy machine.
			reads := configMapReads(client)
			if reads["list"] != 1 || reads["get"] != 0 {
				t.Errorf("Relist read ConfigMaps with %v, want one list and no GET", reads)
			}
			for _, ns := range []string{"a", "b", "c"} {
				for _, name := range []string{"held-1", "held-2"} {
					if _, exists, _, _ := e.cached(cmGVR, ns, name); !exists {
						t.Errorf("after Relist, %s/%s is not in the cache", ns, name)
					}
				}
			}
			client.ClearActions()
			for _, key := range keys {
				if res, err := e.Sync(ctx, key); err != nil || !res.InLine || res.Reading {
					t.Errorf("Sync of %s after Relist = %+v, %v; want in line", key, res, err)
				}
			}
			e.Relist(ctx, keys)
			if reads := configMapReads(client); reads["list"] != 0 || reads["get"] != 0 {
				t.Errorf("the Syncs after Relist, and a Relist with nothing missing, read ConfigMaps with %v; want no list and no GET", reads)
			}
		})
	}
}

// configMapReads counts client's requests for ConfigMaps by verb.
func configMapReads(client *dynamicfake.FakeDynamicClient) map[string]int {
	reads := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetResource() == cmGVR {
			reads[a.GetVerb()]++
		}
	}
	return reads
}

// TestHoldInformersDeclaredInBatches: sets declared in batches into an
// engine that watches none of their types, with Prepare between batches,
// are resolved batch by batch, and the type's informer, held until the
// last batch, lists once and finds every batch's objects. Started by the
// first batch's Prepare, it would have listed before the second was
// declared, and Relist would have listed again.
func TestHoldInformersDeclaredInBatches(t *testing.T) {
	var existing []runtime.Object
	for _, ns := range []string{"a", "b"} {
		existing = append(existing, declaredCM(ns, "held"), declaredCM(ns, "other"))
	}
	e, client := configMapEngine(existing...)
	ctx := runSynced(t, e)

	release := e.HoldInformers()
	e.Declare("k-a", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("a", "held")}})
	e.Prepare(ctx)
	e.mu.Lock()
	unresolved := len(e.sets["k-a"].unresolved)
	e.mu.Unlock()
	if unresolved != 0 {
		t.Errorf("the first batch has %d objects unresolved after its Prepare, want none", unresolved)
	}
	// Long enough for an informer the first batch started to list.
	time.Sleep(100 * time.Millisecond)
	if got := e.Watched(); len(got) != 0 {
		t.Errorf("the engine watches %v while its informers are held, want nothing", got)
	}
	e.Declare("k-b", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("b", "held")}})
	e.Prepare(ctx)
	release()
	e.Relist(ctx, []string{"k-a", "k-b"})
	if !e.WaitForSynced(ctx) {
		t.Fatal("the informers did not sync")
	}
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource() == cmGVR {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("the ConfigMaps were listed %d times, want once", lists)
	}
	for _, ns := range []string{"a", "b"} {
		if _, exists, _, _ := e.cached(cmGVR, ns, "held"); !exists {
			t.Errorf("%s/held is not in the cache after the held informer listed", ns)
		}
	}
}

// TestSyncWaitsForHeldInformer: a set declared alone while a burst holds
// the informers (a lock that came just before the burst's gathering) and
// synced before the Hold is released waits for its type's list after the
// Hold, as for any first list, and reads none of its objects alone.
func TestSyncWaitsForHeldInformer(t *testing.T) {
	e, client := configMapEngine(declaredCM("a", "one"), declaredCM("a", "two"))
	ctx := runSynced(t, e)
	release := e.HoldInformers()
	e.Declare("lone", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("a", "one"), declaredCM("a", "two")}})
	synced := make(chan error, 1)
	go func() {
		_, err := e.Sync(ctx, "lone")
		synced <- err
	}()
	time.Sleep(50 * time.Millisecond)
	release()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatalf("Sync = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sync did not return after the Hold was released")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == cmGVR {
			t.Errorf("the sync read %s alone, want it from the held informer's list", a.(clienttesting.GetAction).GetName())
		}
	}
}

// runSynced runs e until the test ends, and returns once its informers
// have listed, with the context it runs in.
func runSynced(t *testing.T, e *Engine) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = e.Run(ctx) }()
	if !e.WaitForSynced(ctx) {
		t.Fatal("the informers did not sync")
	}
	return ctx
}

// configMapEngine is an engine over a fake cluster of existing, which
// serves ConfigMaps and their merge rules.
func configMapEngine(existing ...runtime.Object) (*Engine, *dynamicfake.FakeDynamicClient) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR: "ConfigMapList",
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}: "CustomResourceDefinitionList",
	}, existing...)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	return New(client, resettable{mapper}, func(string) {}, Options{OpenAPI: &servedDocs{docs: map[string]string{"api/v1": configMapDoc}}}), client
}

// TestDeclareResolvesOutsideTheLock: once the merge rules of a set's kinds
// are read, Declare resolves its objects (and packs each declaration)
// before it takes the engine's lock, so that sets declared from many
// goroutines at once, as at a start or in a burst, resolve in parallel.
func TestDeclareResolvesOutsideTheLock(t *testing.T) {
	e, _ := configMapEngine()
	e.Declare("first", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("a", "first")}})
	e.Prepare(context.Background())
	resolved := 0
	e.Declare("second", ObjectSet{
		Objects: []*unstructured.Unstructured{declaredCM("a", "second"), declaredCM("b", "second")},
		Ignore: func(*unstructured.Unstructured) []Pointer {
			resolved++
			if !e.mu.TryLock() {
				t.Error("Declare resolved an object under the engine's lock")
				return nil
			}
			e.mu.Unlock()
			return nil
		},
	})
	if resolved != 2 {
		t.Errorf("Declare resolved %d objects of the second set, want 2", resolved)
	}
	e.mu.Lock()
	unresolved := len(e.sets["second"].unresolved)
	e.mu.Unlock()
	if unresolved != 0 {
		t.Errorf("the second set has %d objects unresolved, want none", unresolved)
	}
}

// declaredCM is a ConfigMap as a set declares it.
func declaredCM(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns}, "data": map[string]any{"key": "declared"}}}
}

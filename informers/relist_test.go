package informers

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// TestRelist: objects tracked after their informer listed are not in its
// cache; Relist declines while a scan costs less than a list, and
// otherwise lists the type again into the same cache, which stays synced
// meanwhile, delivers the newly tracked objects and then closes the
// channel every caller of the same relist joined. Relists asked for while
// one runs follow it; once they end, scans count anew. Events after them
// flow as before, and a stopped registry relists nothing. Refresh relists
// whatever the scans read.
func TestRelist(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR:       "ConfigMapList",
		crdResource: "CustomResourceDefinitionList",
	}, cm("a", "held"), cm("a", "late-1"), cm("b", "late-2"), cm("b", "other"))
	var mu sync.Mutex
	tracked := map[string]bool{"held": true}
	seen := map[string]int{}
	r := NewRegistry(client, Options{
		Handler: func(_ schema.GroupVersionResource, obj any) {
			// Untracked objects' events come as stubs.
			if _, stub := obj.(*Stub); stub {
				return
			}
			if m, ok := obj.(metav1.Object); ok {
				mu.Lock()
				seen[m.GetName()]++
				mu.Unlock()
			}
		},
		Tracked: func(_ schema.GroupVersionResource, _, name string) bool {
			mu.Lock()
			defer mu.Unlock()
			return tracked[name]
		},
	})
	r.Acquire(cmGVR)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- r.Run(ctx) }()
	waitFor(t, "the informer to sync", func() bool { return r.Current(cmGVR) })

	mu.Lock()
	tracked["late-1"], tracked["late-2"] = true, true
	mu.Unlock()
	if _, exists, _, _ := r.Get(cmGVR, "a", "late-1"); exists {
		t.Fatal("an object untracked at the informer's list is in its cache")
	}
	if wait := r.Relist(cmGVR); wait != nil {
		t.Fatal("Relist relisted before the type's scans had read as much as its list")
	}
	// Scans that read the 4 objects the list read make a list cheaper.
	r.scannedObjects(cmGVR, 3)
	if wait := r.Relist(cmGVR); wait != nil {
		t.Fatal("Relist relisted after scans had read 3 objects of a list of 4")
	}
	r.scannedObjects(cmGVR, 1)
	wait := r.Relist(cmGVR)
	if wait == nil {
		t.Fatal("Relist declined after scans had read as much as the list")
	}
	if again := r.Relist(cmGVR); again != wait {
		t.Error("a second Relist before the first began did not join it")
	}
	for stop := time.After(10 * time.Second); ; {
		if !r.Current(cmGVR) {
			t.Fatal("the informer was not current while it relisted")
		}
		select {
		case <-wait:
		case <-stop:
			t.Fatal("the relist was not stored within 10 s")
		default:
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	for _, key := range [][2]string{{"a", "late-1"}, {"b", "late-2"}} {
		if _, exists, synced, _ := r.Get(cmGVR, key[0], key[1]); !exists || !synced {
			t.Errorf("after the relist, %s/%s exists %t, synced %t; want both", key[0], key[1], exists, synced)
		}
	}
	if _, exists, _, _ := r.Get(cmGVR, "b", "other"); exists {
		t.Error("the relist stored an untracked object")
	}
	mu.Lock()
	if seen["late-1"] != 1 || seen["late-2"] != 1 {
		t.Errorf("the relist delivered late-1 %d and late-2 %d times, want once each", seen["late-1"], seen["late-2"])
	}
	mu.Unlock()
	// While relists keep coming, each joins the next; once one ends with
	// none asked for, scans count anew.
	next := r.Relist(cmGVR)
	if next == nil || next == wait {
		t.Fatal("a Relist right after a relist did not ask for the next")
	}
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("the next relist was not stored within 10 s")
	}
	waitFor(t, "the relists to end", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.entries[cmGVR].relisting
	})
	if r.Relist(cmGVR) != nil {
		t.Error("Relist relisted after its relists had ended, with no scan since")
	}
	// Refresh relists whatever the scans read.
	refresh := r.Refresh(cmGVR)
	if refresh == nil {
		t.Fatal("Refresh did not relist a running informer with no scan since its list")
	}
	select {
	case <-refresh:
	case <-time.After(10 * time.Second):
		t.Fatal("the refresh was not stored within 10 s")
	}

	// The relisted informer watches.
	mu.Lock()
	before := seen["late-1"]
	mu.Unlock()
	changed := cm("a", "late-1")
	changed.Object["data"] = map[string]any{"big": "changed"}
	changed.SetResourceVersion("2")
	if _, err := client.Resource(cmGVR).Namespace("a").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change after the relist", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["late-1"] == before+1
	})

	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	r.scannedObjects(cmGVR, 100)
	if r.Relist(cmGVR) != nil || r.Refresh(cmGVR) != nil {
		t.Error("a stopped registry relisted")
	}
}

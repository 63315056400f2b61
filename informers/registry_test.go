package informers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func cm(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": "1"},
		"data":     map[string]any{"big": "payload"},
	}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRegistryStartsAndStopsOnDemand(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR:       "ConfigMapList",
		crdResource: "CustomResourceDefinitionList",
	}, cm("a", "tracked"), cm("a", "untracked"))
	var mu sync.Mutex
	var events []string
	r := NewRegistry(client, Options{
		Handler: func(gvr schema.GroupVersionResource, obj any) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, obj.(metav1.Object).GetName())
		},
		Tracked: func(_ schema.GroupVersionResource, _, name string) bool { return name == "tracked" },
	})

	// Acquired before Run: starts with Run.
	r.Acquire(cmGVR)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- r.Run(ctx) }()
	waitFor(t, "the informer to sync", func() bool {
		_, _, synced, _ := r.Get(cmGVR, "a", "tracked")
		return synced
	})
	if got := r.Running(); !slices.Equal(got, []schema.GroupVersionResource{cmGVR}) {
		t.Errorf("Running() = %v, want [%v]", got, cmGVR)
	}

	// Tracked objects are stored whole, the rest as metadata only.
	full, _, _, _ := r.Get(cmGVR, "a", "tracked")
	if _, ok := full.(*unstructured.Unstructured); !ok {
		t.Errorf("tracked object stored as %T, want *unstructured.Unstructured", full)
	}
	if stored, exists, _, _ := r.Get(cmGVR, "a", "untracked"); exists {
		t.Errorf("untracked object stored as %#v, want it not stored", stored)
	}
	waitFor(t, "initial events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 2
	})

	// A second Acquire shares the informer; the first Release keeps it.
	r.Acquire(cmGVR)
	r.Release(cmGVR)
	if len(r.Running()) != 1 {
		t.Fatal("informer stopped while still acquired")
	}
	// The last Release stops it, removes its handler and waits for it.
	r.Release(cmGVR)
	if got := r.Running(); len(got) != 0 {
		t.Errorf("Running() after the last Release = %v, want none", got)
	}
	if _, _, synced, _ := r.Get(cmGVR, "a", "tracked"); synced {
		t.Error("Get on a released type says synced")
	}
	mu.Lock()
	before := len(events)
	mu.Unlock()
	if _, err := client.Resource(cmGVR).Namespace("a").Create(ctx, cm("a", "late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	after := len(events)
	mu.Unlock()
	if after != before {
		t.Errorf("a stopped informer delivered %d more events", after-before)
	}

	// Acquired while running: starts at once.
	r.Acquire(cmGVR)
	waitFor(t, "the restarted informer", func() bool { return len(r.Running()) == 1 })

	cancel()
	select {
	case err := <-runDone:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestHold keeps informers of types acquired while a Hold lasts from
// starting until it is released, so that their first lists find every
// object tracked meanwhile; a running informer is not touched.
func TestHold(t *testing.T) {
	secretGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR:       "ConfigMapList",
		secretGVR:   "SecretList",
		crdResource: "CustomResourceDefinitionList",
	}, cm("a", "first"), cm("a", "second"))
	var mu sync.Mutex
	tracked := map[string]bool{}
	track := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		tracked[name] = true
	}
	r := NewRegistry(client, Options{
		Tracked: func(_ schema.GroupVersionResource, _, name string) bool {
			mu.Lock()
			defer mu.Unlock()
			return tracked[name]
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	r.Acquire(secretGVR)
	waitFor(t, "the running informer", func() bool { return r.Current(secretGVR) })

	release := r.Hold()
	track("first")
	r.Acquire(cmGVR)
	track("second")
	// A sync of a set of the held type waits for its list after the
	// Hold, as for any first list, rather than read its objects alone.
	listed := make(chan bool, 1)
	go func() { listed <- r.WaitForList(ctx, cmGVR) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case got := <-listed:
		t.Fatalf("WaitForList of a held type returned %v before the Hold was released", got)
	default:
	}
	if got := r.Running(); !slices.Equal(got, []schema.GroupVersionResource{secretGVR}) {
		t.Fatalf("Running() while held = %v, want only the informer that ran before", got)
	}
	if _, _, synced, _ := r.Get(cmGVR, "a", "first"); synced {
		t.Error("Get of a held type says synced")
	}
	r.Release(secretGVR)
	r.Acquire(secretGVR)
	if got := r.Running(); len(got) != 0 {
		t.Errorf("Running() after a type was released and acquired again while held = %v, want none", got)
	}

	release()
	release()
	select {
	case got := <-listed:
		if !got {
			t.Error("WaitForList of a held type = false after the Hold was released, want its list")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitForList of a held type did not return after the Hold was released")
	}
	waitFor(t, "the held informers to list", func() bool { return r.Current(cmGVR) && r.Current(secretGVR) })
	for _, name := range []string{"first", "second"} {
		if _, exists, _, _ := r.Get(cmGVR, "a", name); !exists {
			t.Errorf("ConfigMap %s, tracked while held, is not in the first list", name)
		}
	}
}

// TestWaitForList gives up on a list that fails (as one the locker's RBAC
// forbids), where WaitForSync would wait, and waits for one that works.
func TestWaitForList(t *testing.T) {
	for _, forbidden := range []bool{true, false} {
		client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			cmGVR:       "ConfigMapList",
			crdResource: "CustomResourceDefinitionList",
		}, cm("a", "tracked"))
		if forbidden {
			client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("cannot list"))
			})
		}
		r := NewRegistry(client, Options{})
		r.Acquire(cmGVR)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = r.Run(ctx) }()
		waitFor(t, "the informer to start", func() bool { return len(r.Running()) == 1 })
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if got := r.WaitForList(wctx, cmGVR); got == forbidden || wctx.Err() != nil {
			t.Errorf("forbidden %v: WaitForList = %v (context: %v), want %v without waiting out the context", forbidden, got, wctx.Err(), !forbidden)
		}
		if forbidden && !apierrors.IsForbidden(r.Err(cmGVR)) {
			t.Errorf("Err() = %v, want the Forbidden", r.Err(cmGVR))
		}
		wcancel()
		cancel()
	}
}

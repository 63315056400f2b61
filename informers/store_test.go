package informers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
)

func TestTrackingStore(t *testing.T) {
	tracked := map[string]bool{"t1": true}
	strip := (&Registry{opts: Options{
		Tracked: func(_ schema.GroupVersionResource, _, name string) bool { return tracked[name] },
	}}).strip
	watched := func(ns, name string) *watchStub { return &watchStub{Stub: *NewStub(cm(ns, name))} }
	type step struct {
		name   string
		do     func(s *trackingStore) error
		stored []string // keys stored afterwards
		events []string // what the handler saw, as type:key
	}
	steps := []step{
		{
			name:   "the first list stores tracked objects only and reports every object",
			do:     func(s *trackingStore) error { return s.Replace([]any{cm("a", "t1"), cm("a", "u1")}, "1") },
			stored: []string{"a/t1"},
			events: []string{"full:a/t1", "stub:a/u1"},
		},
		{
			name:   "an untracked object that becomes tracked is stored at its next event",
			do:     func(s *trackingStore) error { tracked["u1"] = true; return s.Update(cm("a", "u1")) },
			stored: []string{"a/t1", "a/u1"},
			events: []string{"full:a/u1"},
		},
		{
			name:   "an object that is no longer tracked leaves the store",
			do:     func(s *trackingStore) error { tracked["t1"] = false; return s.Update(cm("a", "t1")) },
			stored: []string{"a/u1"},
			events: []string{"stub:a/t1"},
		},
		{
			name:   "a delete removes and reports",
			do:     func(s *trackingStore) error { return s.Delete(cm("a", "u1")) },
			stored: nil,
			events: []string{"full:a/u1"},
		},
		{
			name: "a relist reports stored objects it lacks as deleted",
			do: func(s *trackingStore) error {
				tracked["t2"] = true
				if err := s.Add(cm("b", "t2")); err != nil {
					return err
				}
				return s.Replace([]any{cm("a", "u2")}, "2")
			},
			stored: nil,
			events: []string{"full:b/t2", "gone:b/t2", "stub:a/u2"},
		},
		{
			name:   "an object the watch left undecoded is reported as a Stub",
			do:     func(s *trackingStore) error { return s.Add(watched("a", "w1")) },
			stored: nil,
			events: []string{"stub:a/w1"},
		},
		{
			name:   "and so is its delete",
			do:     func(s *trackingStore) error { return s.Delete(watched("a", "w1")) },
			stored: nil,
			events: []string{"stub:a/w1"},
		},
	}
	var events []string
	s := newTrackingStore(cmGVR, strip, func(_ schema.GroupVersionResource, obj any) {
		kind := "full"
		switch o := obj.(type) {
		case *Stub:
			kind = "stub"
		case cache.DeletedFinalStateUnknown:
			events = append(events, "gone:"+o.Key)
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		events = append(events, kind+":"+key)
	})
	if s.HasSynced() {
		t.Fatal("synced before the first list")
	}
	for _, st := range steps {
		events = nil
		if err := st.do(s); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !s.HasSynced() {
			t.Errorf("%s: not synced", st.name)
		}
		if got := s.objects.ListKeys(); !sameSet(got, st.stored) {
			t.Errorf("%s: stored %v, want %v", st.name, got, st.stored)
		}
		if !sameSet(events, st.events) {
			t.Errorf("%s: handler saw %v, want %v", st.name, events, st.events)
		}
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && sets.New(a...).Equal(sets.New(b...))
}

// TestStubKeys holds a stub's getters and its cache key (see keyOf), which
// the store's map keeps as part of the stub's own string, to what
// client-go's key function and the object say.
func TestStubKeys(t *testing.T) {
	for _, tt := range []struct{ namespace, name, version string }{
		{"ns", "app", "12345"},
		{"", "cluster-wide", "7"},
		{"a-long-namespace-name", "n", ""},
	} {
		s := newStub(tt.namespace, tt.name, tt.version)
		if s.GetNamespace() != tt.namespace || s.GetName() != tt.name || s.GetResourceVersion() != tt.version {
			t.Errorf("stub of %q %q %q reads back %q %q %q", tt.namespace, tt.name, tt.version, s.GetNamespace(), s.GetName(), s.GetResourceVersion())
		}
		want, err := cache.MetaNamespaceKeyFunc(&metav1.ObjectMeta{Namespace: tt.namespace, Name: tt.name})
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range []any{s, &watchStub{Stub: *s}} {
			if got, err := keyOf(obj); err != nil || got != want {
				t.Errorf("keyOf(%T of %s) = %q, %v; want %q", obj, want, got, err, want)
			}
		}
	}
	deleted := cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: newStub("ns", "gone", "1")}
	if got, err := keyOf(deleted); err != nil || got != "ns/gone" {
		t.Errorf("keyOf(a deleted object) = %q, %v; want ns/gone", got, err)
	}
}

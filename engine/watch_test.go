package engine

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/informers"
)

// TestWatchNotifies: an event of an object a Watch targets calls its
// notify, whether or not a set holds the object; others do not; a new
// Watch of the key replaces its targets, and Unwatch ends them.
func TestWatchNotifies(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	stub := func(namespace, name string) any {
		u := &unstructured.Unstructured{}
		u.SetNamespace(namespace)
		u.SetName(name)
		return informers.NewStub(u)
	}
	cases := []struct {
		name    string
		targets []WatchTarget
		gvr     schema.GroupVersionResource
		obj     any
		want    bool
	}{
		{"the object", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "settings"}}, cmGVR, stub("apps", "settings"), true},
		{"its deletion", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "settings"}}, cmGVR, cache.DeletedFinalStateUnknown{Obj: stub("apps", "settings")}, true},
		{"another name", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "settings"}}, cmGVR, stub("apps", "other"), false},
		{"another namespace", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "settings"}}, cmGVR, stub("web", "settings"), false},
		{"another type", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "settings"}}, secrets, stub("apps", "settings"), false},
		{"a list of a namespace", []WatchTarget{{GVR: cmGVR, Namespace: "apps"}}, cmGVR, stub("apps", "any"), true},
		{"a list of a namespace, elsewhere", []WatchTarget{{GVR: cmGVR, Namespace: "apps"}}, cmGVR, stub("web", "any"), false},
		{"a list of every namespace", []WatchTarget{{GVR: cmGVR}}, cmGVR, stub("web", "any"), true},
		{"a cluster-scoped object", []WatchTarget{{GVR: roleGVR, Name: "view"}}, roleGVR, stub("", "view"), true},
		{"the second target", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "a"}, {GVR: secrets, Namespace: "apps", Name: "s"}}, secrets, stub("apps", "s"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, _, notified := newTestEngine(t)
			var calls []WatchTarget
			e.Watch("render/a", tc.targets, func(t WatchTarget) { calls = append(calls, t) })
			e.onEvent(tc.gvr, tc.obj)
			if got := len(calls) == 1; got != tc.want {
				t.Errorf("notified %d times, want notified: %v", len(calls), tc.want)
			}
			if len(calls) == 1 {
				i := slices.IndexFunc(tc.targets, func(t WatchTarget) bool { return t.GVR == tc.gvr })
				if calls[0] != tc.targets[i] {
					t.Errorf("notified with %+v, want the target that matched, %+v", calls[0], tc.targets[i])
				}
			}
			if len(*notified) != 0 {
				t.Errorf("sets notified %v: a watch is no set", *notified)
			}
		})
	}

	t.Run("replaced and ended", func(t *testing.T) {
		e, _, _ := newTestEngine(t)
		var calls []string
		e.Watch("k", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "a"}}, func(WatchTarget) { calls = append(calls, "first") })
		e.Watch("k", []WatchTarget{{GVR: cmGVR, Namespace: "apps", Name: "b"}}, func(WatchTarget) { calls = append(calls, "second") })
		e.onEvent(cmGVR, stub("apps", "a"))
		e.onEvent(cmGVR, stub("apps", "b"))
		e.Unwatch("k")
		e.onEvent(cmGVR, stub("apps", "b"))
		if want := []string{"second"}; !slices.Equal(calls, want) {
			t.Errorf("calls %v, want %v", calls, want)
		}
	})
}

// TestWatchHoldsInformers: a watched type's informer is acquired for as
// long as some Watch targets it, and released with the last.
func TestWatchHoldsInformers(t *testing.T) {
	e, _, _ := newTestEngine(t)
	refs := func(gvr schema.GroupVersionResource) int { return e.informers.Refs(gvr) }
	e.Watch("a", []WatchTarget{{GVR: cmGVR, Namespace: "x", Name: "1"}, {GVR: cmGVR, Namespace: "x", Name: "2"}}, func(WatchTarget) {})
	e.Watch("b", []WatchTarget{{GVR: cmGVR, Namespace: "y"}}, func(WatchTarget) {})
	if got := refs(cmGVR); got != 2 {
		t.Errorf("configmaps acquired %d times by two watches, want 2 (once each)", got)
	}
	e.Watch("a", []WatchTarget{{GVR: roleGVR, Name: "view"}}, func(WatchTarget) {})
	if got := refs(cmGVR); got != 1 {
		t.Errorf("configmaps acquired %d times after a's Watch moved on, want 1", got)
	}
	e.Unwatch("b")
	e.Unwatch("a")
	e.Unwatch("never")
	if got, got2 := refs(cmGVR), refs(roleGVR); got != 0 || got2 != 0 {
		t.Errorf("acquired %d and %d times after every Unwatch, want 0", got, got2)
	}
}

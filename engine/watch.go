package engine

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WatchTarget names objects whose changes a caller wants to hear of: one
// object, or with an empty Name every object of the type in Namespace (in
// every namespace when Namespace is empty too).
type WatchTarget struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
}

func (t WatchTarget) matches(namespace, name string) bool {
	return (t.Namespace == "" || t.Namespace == namespace) && (t.Name == "" || t.Name == name)
}

// watches are the targets callers watch through the engine's informers,
// by type, so that an event costs one map lookup when nobody watches its
// type.
type watches struct {
	mu     sync.RWMutex
	byKey  map[string]*watcher
	byType map[schema.GroupVersionResource]map[*watcher]struct{}
}

type watcher struct {
	targets []WatchTarget
	notify  func(WatchTarget)
}

// Watch calls notify, from informer goroutines, with the first of targets
// that names an object that was added, changed or deleted, until Unwatch(key) or the next
// Watch of key. It watches objects that no set holds, such as what a
// chart's templates look up: the engine's informers run for their types
// as long as they are watched. notify must be quick, and must not call
// Watch or Unwatch: releasing a type waits for its informer to stop.
func (e *Engine) Watch(key string, targets []WatchTarget, notify func(WatchTarget)) {
	targets = slices.Clone(targets)
	w := &watcher{targets: targets, notify: notify}
	old := e.watches.replace(key, w)
	// The new types are acquired before the old ones are released, so
	// that a type both watch keeps its informer.
	for _, gvr := range targetTypes(targets) {
		e.informers.Acquire(gvr)
	}
	if old != nil {
		for _, gvr := range targetTypes(old.targets) {
			e.informers.Release(gvr)
		}
	}
}

// Unwatch stops the notifications of key's Watch.
func (e *Engine) Unwatch(key string) {
	if old := e.watches.replace(key, nil); old != nil {
		for _, gvr := range targetTypes(old.targets) {
			e.informers.Release(gvr)
		}
	}
}

// targetTypes are the distinct types of targets.
func targetTypes(targets []WatchTarget) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, t := range targets {
		if !slices.Contains(out, t.GVR) {
			out = append(out, t.GVR)
		}
	}
	return out
}

// replace makes w key's watcher (none if nil) and returns the one before.
func (ws *watches) replace(key string, w *watcher) *watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byKey == nil {
		ws.byKey = map[string]*watcher{}
		ws.byType = map[schema.GroupVersionResource]map[*watcher]struct{}{}
	}
	old := ws.byKey[key]
	if old != nil {
		for _, gvr := range targetTypes(old.targets) {
			delete(ws.byType[gvr], old)
			if len(ws.byType[gvr]) == 0 {
				delete(ws.byType, gvr)
			}
		}
		delete(ws.byKey, key)
	}
	if w != nil {
		ws.byKey[key] = w
		for _, gvr := range targetTypes(w.targets) {
			if ws.byType[gvr] == nil {
				ws.byType[gvr] = map[*watcher]struct{}{}
			}
			ws.byType[gvr][w] = struct{}{}
		}
	}
	return old
}

// changed notifies every watcher with a target that the object matches.
func (ws *watches) changed(gvr schema.GroupVersionResource, namespace, name string) {
	ws.mu.RLock()
	type call struct {
		notify func(WatchTarget)
		target WatchTarget
	}
	var calls []call
	for w := range ws.byType[gvr] {
		for _, t := range w.targets {
			if t.GVR == gvr && t.matches(namespace, name) {
				calls = append(calls, call{w.notify, t})
				break
			}
		}
	}
	ws.mu.RUnlock()
	for _, c := range calls {
		c.notify(c.target)
	}
}

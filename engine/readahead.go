package engine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// An informer keeps no object that no set held at its last event: most of
// a cluster is untracked, and keeping it would cost the locker its memory.
// So a set declared after its types' informers listed (CRs created in a
// burst after the locker started) finds each of its objects missing from
// the caches, and read each with a GET: 22,791 of them for 500 releases of
// 50 objects. A sync reads those objects ahead instead, one list per type
// and namespace.

// readAheadMin is how many of a sync's objects of one type and namespace
// must be missing from the caches before they are listed rather than read
// one by one.
const readAheadMin = 4

// readAheadSpan is how many objects a read-ahead list may return for each
// object it is for: a namespace that holds many more objects of the type
// than the set does is listed one page of that size, and what the page
// does not settle is read alone.
const readAheadSpan = 4

// typeNamespace is one read-ahead list: a type, in one namespace ("" for
// cluster-scoped types).
type typeNamespace struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// readAhead is what a sync listed: by type and namespace, the objects the
// list returned by name, and whether it returned all there were.
type readAhead map[typeNamespace]listedObjects

type listedObjects struct {
	byName   map[string]*unstructured.Unstructured
	complete bool
}

// get returns the object ref as listed, nil if a complete list did not
// have it (it does not exist), and false if it was not listed.
func (r readAhead) get(ref ObjectRef) (*unstructured.Unstructured, bool) {
	l, ok := r[typeNamespace{ref.GVR, ref.Namespace}]
	if !ok {
		return nil, false
	}
	if obj, found := l.byName[ref.Name]; found {
		return obj, true
	}
	return nil, l.complete
}

// readAhead lists the objects of todo that the caches do not hold, where a
// type and namespace has readAheadMin of them or more. An object still to
// be verified is read alone, as live reads it. A list that fails leaves
// its objects to be read alone.
func (e *Engine) readAhead(ctx context.Context, todo []dirtyObject) readAhead {
	missing := map[typeNamespace]int{}
	for _, obj := range todo {
		if p := obj.proof; p != nil && !p.checked {
			continue
		}
		ref := obj.ref
		if _, exists, synced, err := e.cached(ref.GVR, ref.Namespace, ref.Name); err == nil && synced && !exists {
			missing[typeNamespace{ref.GVR, ref.Namespace}]++
		}
	}
	var read readAhead
	for tn, n := range missing {
		if n < readAheadMin {
			continue
		}
		limit := int64(max(n*readAheadSpan, 64))
		list, err := e.resource(ObjectRef{GVR: tn.gvr, Namespace: tn.namespace}).List(ctx, metav1.ListOptions{Limit: limit})
		if err != nil {
			continue
		}
		l := listedObjects{byName: make(map[string]*unstructured.Unstructured, len(list.Items)), complete: list.GetContinue() == ""}
		for i := range list.Items {
			l.byName[list.Items[i].GetName()] = &list.Items[i]
		}
		if read == nil {
			read = readAhead{}
		}
		read[tn] = l
	}
	return read
}

package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/informers"
)

// An informer keeps no object that no set held at its last event: most of
// a cluster is untracked, and keeping it would cost the locker its memory.
// So a set declared after its types' informers listed (CRs created in a
// burst after the locker started) finds each of its objects missing from
// the caches, and would read each with a GET: 12,650 of them for 500
// releases of 50 objects. A sync reads those objects ahead instead, with
// one read of each type and namespace, and what that read returns of
// objects other sets hold is kept for their syncs (see listings). In a
// burst most sets are declared after the read of their namespace, which
// then cannot serve them: it saved one read in seven at 500 releases.
// The read is a scan (informers.Registry.Scan), as the informers read a
// type at start: of a namespace's objects, mostly untracked, only those a
// set holds are decoded. A list decoded them all, and in a burst of 500
// releases its decoding took 64% of the locker's CPU. Where releases
// share namespaces and come in a burst, a scan a set still reads the same
// untracked objects over and over: once a type's scans have read as much
// as its informer's list did, the sets after wait for the informer to
// list it again instead (informers.Registry.Relist), one list for every
// set declared before it began.

// readAheadMin is how many of a sync's objects of one type and namespace
// must be missing from the caches before they are listed rather than read
// one by one.
const readAheadMin = 4

// readAheadSpan is how many objects a read-ahead list may return for each
// object it is for: a namespace that holds many more objects of the type
// than the set does is listed only that far, and what the list does not
// settle is read alone.
const readAheadSpan = 16

// readAheadPage is the page a read-ahead list asks for, and the least it
// may list whatever the span.
const readAheadPage = 500

// listingTTL bounds how long what a list returned is kept for other sets'
// syncs: they follow the list within the burst of declarations that caused
// it, and an object kept longer is read again.
const listingTTL = 10 * time.Second

// typeNamespace is one read-ahead list: a type, in one namespace ("" for
// cluster-scoped types).
type typeNamespace struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// readAhead is what a sync listed, or took from another sync's list: by
// type and namespace, the objects by name, and whether the list returned
// all there were.
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

// readAhead reads the objects of todo that the caches do not hold, where a
// type and namespace has readAheadMin of them or more: from what another
// sync's list kept for them, or with a list of its own. An object still to
// be verified is read alone, as live reads it. A list that fails leaves its
// objects to be read alone.
//
// Objects the set has never checked, declared after their informer
// listed, may instead wait for the informer to list its type again (see
// informers.Registry.Relist), when the type's scans have read as much as
// that list will: their types and namespaces are deferred, left out of
// reads, and each of waits is closed once its list is stored.
func (e *Engine) readAhead(ctx context.Context, key string, s *objectSet, todo []dirtyObject) (read readAhead, deferred map[typeNamespace]bool, waits []<-chan struct{}) {
	e.mu.Lock()
	owned, relisted := s.owned, s.relisted
	e.mu.Unlock()
	missing := map[typeNamespace][]*lockedObject{}
	for _, obj := range todo {
		if p := obj.proof; p != nil && !p.checked {
			continue
		}
		ref := obj.ref()
		if _, exists, synced, err := e.cached(ref.GVR, ref.Namespace, ref.Name); err == nil && synced && !exists {
			tn := typeNamespace{ref.GVR, ref.Namespace}
			missing[tn] = append(missing[tn], obj.lockedObject)
		}
	}
	for tn, objs := range missing {
		l, ok := e.listings.take(tn, owned, objs)
		if !ok {
			// A sync before the relist it waits for (its caller's
			// own, or one that the relist's first objects caused)
			// waits for it still.
			wait := e.relistWaits.pending(key)
			if wait == nil && len(objs) < readAheadMin {
				continue
			}
			if wait == nil {
				wait = e.relist(tn.gvr, objs, relisted)
			}
			if wait != nil {
				if deferred == nil {
					deferred = map[typeNamespace]bool{}
				}
				deferred[tn] = true
				if !slices.Contains(waits, wait) {
					waits = append(waits, wait)
				}
				continue
			}
			if l, ok = e.list(ctx, tn, objs); !ok {
				continue
			}
		}
		if read == nil {
			read = readAhead{}
		}
		read[tn] = l
	}
	if len(waits) > 0 {
		e.mu.Lock()
		s.relisted = true
		e.mu.Unlock()
	}
	return read, deferred, waits
}

// relist asks gvr's informer to list its objects again for objs, when
// none of them was ever checked (an object deleted since its last check is
// read at once: a relist would hold its recreation back) and their set has
// not waited for a relist before, and returns what to wait on, or nil to
// read them now.
func (e *Engine) relist(gvr schema.GroupVersionResource, objs []*lockedObject, waited bool) <-chan struct{} {
	if waited {
		return nil
	}
	for _, o := range objs {
		if o.canonical {
			return nil
		}
	}
	return e.informers.Relist(gvr)
}

// HoldInformers keeps the informers of types the engine does not watch yet
// from starting until release is called, for a caller that declares many
// sets at once and calls Prepare between batches of them (see Relist).
// Prepare resolves each batch as it comes, so that their parsed
// declarations are not all held at once, and starts the informers of the
// types it finds: started by the first batch, an informer lists while the
// later batches are declared, drops their objects, and has to list again
// for them. Held, each new type is listed once, after the last batch,
// with every set's objects tracked. Informers already running are not
// affected; a sync of a set whose type is held waits as it does for an
// informer's first list.
func (e *Engine) HoldInformers() (release func()) {
	return e.informers.Hold()
}

// Relist has the informers list again, once each, the types in which
// the sets of keys have objects the caches lack, and returns once each
// list has been stored, or ctx is done. A caller that declared many sets
// at once after the informers listed their types (a burst of locks)
// calls it before their first Syncs: those then find their objects in the
// caches, where each set would scan its namespaces, and the sets after
// them wait for relists of their own. A set relisted here does not wait
// for another in its Sync; what the list did not find is read then.
// Objects whose kinds' merge rules were not read yet are resolved first,
// as Prepare does.
func (e *Engine) Relist(ctx context.Context, keys []string) {
	e.Prepare(ctx)
	var refs []ObjectRef
	var sets []*objectSet
	e.mu.Lock()
	for _, key := range keys {
		if s := e.sets[key]; s != nil {
			sets = append(sets, s)
			for _, o := range s.objects {
				refs = append(refs, o.ref())
			}
		}
	}
	e.mu.Unlock()
	missing := map[schema.GroupVersionResource]bool{}
	for _, ref := range refs {
		if missing[ref.GVR] {
			continue
		}
		if _, exists, synced, err := e.cached(ref.GVR, ref.Namespace, ref.Name); err == nil && synced && !exists {
			missing[ref.GVR] = true
		}
	}
	var waits []<-chan struct{}
	for gvr := range missing {
		if wait := e.informers.Refresh(gvr); wait != nil {
			waits = append(waits, wait)
		}
	}
	for _, wait := range waits {
		select {
		case <-wait:
		case <-ctx.Done():
			return
		}
	}
	e.mu.Lock()
	for _, s := range sets {
		s.relisted = true
	}
	e.mu.Unlock()
}

// afterRelists syncs key again once each of waits has been closed.
func (e *Engine) afterRelists(key string, waits []<-chan struct{}) {
	for _, wait := range waits {
		e.relistWaits.add(wait, key, e.notify)
	}
}

// relistWaits are the sets waiting on each relist, so that one goroutine a
// relist, not one a set, syncs them when it is stored.
type relistWaits struct {
	mu sync.Mutex
	by map[<-chan struct{}][]string
	// of is what each waiting set waits for.
	of map[string]<-chan struct{}
}

// pending is the relist key's set waits for, nil if none.
func (w *relistWaits) pending(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.of[key]
}

func (w *relistWaits) add(wait <-chan struct{}, key string, notify func(string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.of == nil {
		w.of = map[string]<-chan struct{}{}
	}
	w.of[key] = wait
	if keys, ok := w.by[wait]; ok {
		if !slices.Contains(keys, key) {
			w.by[wait] = append(keys, key)
		}
		return
	}
	if w.by == nil {
		w.by = map[<-chan struct{}][]string{}
	}
	w.by[wait] = []string{key}
	go func() {
		<-wait
		w.mu.Lock()
		keys := w.by[wait]
		delete(w.by, wait)
		for _, key := range keys {
			if w.of[key] == wait {
				delete(w.of, key)
			}
		}
		w.mu.Unlock()
		for _, key := range keys {
			notify(key)
		}
	}()
}

// list lists tn, up to readAheadSpan objects for each of objs, and returns
// objs' share. What it returns of objects other sets hold is kept for
// their syncs. It scans (see informers.Registry.Scan), which decodes only
// the objects some set holds, and lists, decoding them all, only where a
// scan cannot be made.
func (e *Engine) list(ctx context.Context, tn typeNamespace, objs []*lockedObject) (listedObjects, bool) {
	// Sets that take objects into their holding from here on are not
	// served by this list: an event before then, which found the object
	// untracked, may have been dropped, and the list may predate it.
	e.mu.Lock()
	owned := e.owned
	e.mu.Unlock()
	budget := max(len(objs)*readAheadSpan, readAheadPage)
	mine := make(map[string]bool, len(objs))
	for _, o := range objs {
		mine[o.ref().Name] = true
	}
	l, others, ok := e.scan(ctx, tn, mine, budget)
	if !ok {
		l, others, ok = e.listPaged(ctx, tn, mine, budget)
	}
	if !ok {
		return listedObjects{}, false
	}
	if len(others) > 0 {
		e.listings.keep(tn, listing{owned: owned, byName: others})
	}
	return l, true
}

// scan reads tn with the informers' scan: mine's objects, and those other
// sets hold, decoded; the rest read as far as their names. It stops as a
// paged list does (see listPaged). false means no scan
// could be made: the informers have no watch path of their own, or the API
// server refused it, which is remembered.
func (e *Engine) scan(ctx context.Context, tn typeNamespace, mine map[string]bool, budget int) (listedObjects, map[string]*unstructured.Unstructured, bool) {
	if e.noScan.Load() {
		return listedObjects{}, nil, false
	}
	keep := func(name string) bool { return mine[name] || e.tracked(tn.gvr, tn.namespace, name) }
	// As a paged list: at least a page, then until all of mine are found,
	// and never past the budget.
	seen, found := 0, 0
	more := func(name string, kept bool) bool {
		seen++
		if kept && mine[name] {
			found++
		}
		return seen < budget && (found < len(mine) || seen < readAheadPage)
	}
	scanned, err := e.informers.Scan(ctx, tn.gvr, tn.namespace, keep, more)
	switch {
	case errors.Is(err, informers.ErrNoScan), apierrors.IsBadRequest(err), apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err):
		e.noScan.Store(true)
		return listedObjects{}, nil, false
	case err != nil && scanned.Seen == 0:
		return listedObjects{}, nil, false
	}
	l := listedObjects{byName: make(map[string]*unstructured.Unstructured, len(mine)), complete: scanned.Complete && err == nil}
	others := map[string]*unstructured.Unstructured{}
	for name, obj := range scanned.Objects {
		if mine[name] {
			l.byName[name] = obj
		} else {
			others[name] = obj
		}
	}
	return l, others, true
}

// listPaged lists tn a page at a time, until a page ends with all of mine
// found or budget objects read, decoding every object it reads.
func (e *Engine) listPaged(ctx context.Context, tn typeNamespace, mine map[string]bool, budget int) (listedObjects, map[string]*unstructured.Unstructured, bool) {
	l := listedObjects{byName: make(map[string]*unstructured.Unstructured, len(mine))}
	others := map[string]*unstructured.Unstructured{}
	opts := metav1.ListOptions{Limit: readAheadPage}
	for listed := 0; ; {
		list, err := e.resource(ObjectRef{GVR: tn.gvr, Namespace: tn.namespace}).List(ctx, opts)
		if err != nil {
			if listed == 0 {
				return listedObjects{}, nil, false
			}
			break
		}
		for i := range list.Items {
			obj := &list.Items[i]
			switch name := obj.GetName(); {
			case mine[name]:
				l.byName[name] = obj
			case e.tracked(tn.gvr, tn.namespace, name):
				others[name] = obj
			}
		}
		listed += len(list.Items)
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			l.complete = true
			break
		}
		if listed >= budget || len(l.byName) == len(mine) {
			break
		}
	}
	return l, others, true
}

// listings are what read-ahead lists returned of objects that other sets
// held, by type and namespace, until those sets' syncs take them. Taking an
// object, an event of it (the informer keeps it from then on: its set
// holds it), or listingTTL ends its stay.
type listings struct {
	mu sync.Mutex
	by map[typeNamespace]*listing
	// n is len(by), read without mu by every event.
	n atomic.Int32
	// ttl, for tests, replaces listingTTL.
	ttl time.Duration
}

type listing struct {
	// owned is Engine.owned when the list began: it serves the sets whose
	// objects were all held by then (see objectSet.owned), since every
	// event of theirs after that reached the informer's cache, and the
	// list began after their last event it did not keep.
	owned  uint64
	byName map[string]*unstructured.Unstructured
}

func (ls *listings) keep(tn typeNamespace, l listing) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.by == nil {
		ls.by = map[typeNamespace]*listing{}
	}
	kept := &l
	ls.by[tn] = kept
	ls.n.Store(int32(len(ls.by)))
	// A listing no sync takes and no event empties would otherwise keep
	// its objects for good.
	ttl := cmp.Or(ls.ttl, listingTTL)
	time.AfterFunc(ttl, func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.by[tn] == kept {
			ls.dropLocked(tn)
		}
	})
}

// take returns objs as tn's listing has them, removing them from it, if
// the listing serves their set, whose objects were held by owned, and lists
// every one of them. An object it lacks is not taken not to exist: a set
// that took it later is not served.
func (ls *listings) take(tn typeNamespace, owned uint64, objs []*lockedObject) (listedObjects, bool) {
	if ls.n.Load() == 0 {
		return listedObjects{}, false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.by[tn]
	if l == nil {
		return listedObjects{}, false
	}
	if owned > l.owned {
		return listedObjects{}, false
	}
	for _, o := range objs {
		if _, ok := l.byName[o.ref().Name]; !ok {
			return listedObjects{}, false
		}
	}
	out := listedObjects{byName: make(map[string]*unstructured.Unstructured, len(objs))}
	for _, o := range objs {
		out.byName[o.ref().Name] = l.byName[o.ref().Name]
		delete(l.byName, o.ref().Name)
	}
	if len(l.byName) == 0 {
		ls.dropLocked(tn)
	}
	return out, true
}

// forget drops ref from its listing: an event of it has reached the
// informer, whose cache is newer.
func (ls *listings) forget(ref ObjectRef) {
	if ls.n.Load() == 0 {
		return
	}
	tn := typeNamespace{ref.GVR, ref.Namespace}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.by[tn]; l != nil {
		delete(l.byName, ref.Name)
	}
}

func (ls *listings) dropLocked(tn typeNamespace) {
	delete(ls.by, tn)
	ls.n.Store(int32(len(ls.by)))
}

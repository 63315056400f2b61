package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Result says where a set stands after a Sync.
type Result struct {
	// Objects is the number of declared objects.
	Objects int
	// Locked is the number of objects checked and, as far as the engine
	// has seen, as declared.
	Locked int
	// InLine is true when every declared object has been checked and is
	// as declared, as far as the engine has seen. It is what a caller may
	// report as "locked".
	InLine bool
	// Drifts are the differences this Sync found, corrected or not.
	Drifts []Drift
	// Drifted is the number of objects known to differ from their
	// declaration after this Sync: not corrected (ReportOnly, a fight) or
	// whose correction failed.
	Drifted int
	// Fights lists the objects whose corrections are held back because
	// another actor keeps undoing them.
	Fights []Fight
	// RequeueAfter, when not zero, is when the caller should Sync again:
	// a held-back correction is due then.
	RequeueAfter time.Duration
	// Unresolved lists declared objects whose kind the API server does not
	// serve yet (see TypeError).
	Unresolved []error
	// Unverified lists declared objects held back because their owner has
	// not been seen to apply them (see Verification).
	Unverified []Unverified
	// Failed lists objects whose correction the API server refuses for
	// good (see Failure), until their next try.
	Failed []Failure
	// Unchecked lists objects that differ from their declaration where
	// the API server refuses every dry run that would tell drift from
	// the form it stores (see Unchecked): neither drift nor in line,
	// they are not in Drifts or Drifted, and nothing is written to them.
	Unchecked []Unchecked
	// Finished lists finished Jobs that their ttlSecondsAfterFinished
	// deleted: they are not recreated, and not held until they appear
	// again.
	Finished []ObjectRef
	// Unwatched lists the set's resource types whose informers do not
	// see their objects as they are now: not listed yet, or their list
	// or watch is failing, as through an API server outage. Changes to
	// those objects go unseen, so the set is not InLine. Sync reads them
	// from the API server meanwhile, and the set syncs again when the
	// watch is back.
	Unwatched []schema.GroupVersionResource
	// WatchError is why the first of Unwatched whose list or watch
	// failed is not watched (nil if none failed; they are only not
	// listed yet), such as a list the engine's RBAC forbids.
	WatchError error
	// Waiting lists declared objects that wait for a Namespace the set
	// declares and that does not exist yet: they are created once it is.
	// (Objects of a kind whose CRD the set declares wait in Unresolved.)
	Waiting []Waiting
	// Conflicts lists declared objects that another set holds (see
	// Conflict): this set neither checks nor writes them until that set
	// lets them go.
	Conflicts []Conflict
	// Paused says the set is paused (see Engine.Pause): nothing was
	// checked, and the rest of the Result is empty.
	Paused bool
	// Reading says some of the set's objects were not checked: declared
	// after their informers listed, they wait for the informers to list
	// their types again (see informers.Registry.Relist), and the set
	// syncs again once they have. The rest of the Result counts them as
	// not in line yet; a caller that reports where the set stands can
	// wait for that sync.
	Reading bool
	// Applied counts the objects of the declaration that needed
	// verifying and that, when they were verified, showed a write of
	// one of Verification.Owners at or after Verification.Since, and
	// were no longer as Verification.Fallback had them: the owner was
	// seen applying this declaration. An object verified only because
	// it already was as declared counts none: a declaration can restate
	// what is live in another form without anyone applying it.
	Applied int
}

// Waiting is a declared object held back until the Namespace it lives in,
// which the same set declares, exists: creating it first would fail with
// NamespaceNotFound, which is no failure while that Namespace is on its way.
type Waiting struct {
	Ref       ObjectRef
	Kind      string
	Namespace string
}

// Conflict is a declared object that another set holds. One object is held
// by one set at a time, or two declarations would take turns writing it:
// the set whose lock began first holds it (see ObjectSet.Since), and the
// next in line takes it over when that one forgets it or stops declaring
// it, not while it is paused (see Engine.Pause).
type Conflict struct {
	Ref  ObjectRef
	Kind string
	// Holder is the key of the set that holds the object.
	Holder string
}

// Drift is one object found not as declared.
type Drift struct {
	Ref  ObjectRef
	Kind string
	// Paths are the JSON pointers that differ; empty when Deleted. An
	// entry of a keyed list is named by its keys, as in
	// /spec/ports/{"port":53,"protocol":"TCP"}/targetPort.
	Paths   []string
	Deleted bool
	// Managers are who changed the drifted fields (see Manager). A
	// deletion leaves no record of who made it.
	Managers []Manager
	// Corrected says the engine wrote the object back. Held says it did
	// not, and that the drift need not be reported again: a fight holds
	// the object back (see Fight), a ReportOnly set already reported this
	// version of it, or a Failure waits for its next try. Err is the
	// correction's failure.
	Corrected bool
	Held      bool
	Err       error
	// Latency is from the watch event that showed the drift to the
	// correction's response.
	Latency time.Duration
	// Applying says the difference is the set's own doing: the object's
	// declaration is new or changed since it was last in line (Lock,
	// Update, a new revision), and this is its first correction under
	// it, not someone else's change. A caller that reports only others'
	// changes as drift, as Locker's OnDrift does, skips these.
	Applying bool
}

// errNamespaceWaiting says a correction waits for a Namespace the set
// declares (see Waiting).
var errNamespaceWaiting = errors.New("waiting for the set's own namespace")

// errTypeWaiting says the creation of a custom resource waits for its CRD,
// which the set declares, to be served: the CRD was deleted, taking its
// objects with it, and is being recreated. A creation can be NotFound only
// for its namespace or its type, and is Forbidden while the CRD is still
// terminating (see crdTerminating). Backing off exponentially on each try
// would leave the object missing for a minute or more after the CRD is
// back.
var errTypeWaiting = errors.New("waiting for the set's own CRD to be served")

// Fight is an object whose corrections another actor keeps undoing. The
// engine backs off exponentially rather than join a write loop.
type Fight struct {
	Ref      ObjectRef
	Kind     string
	Managers []Manager
	Paths    []string
	// Until is when the next correction is allowed.
	Until time.Time
}

// Sync checks every dirty object of key's set and corrects those that are
// not as declared. It returns the errors of the objects it could not check
// or correct, joined; those objects stay dirty for the next Sync. A key that
// holds no set syncs to an empty Result, and a paused one to a Result that
// says Paused.
func (e *Engine) Sync(ctx context.Context, key string) (Result, error) {
	if e.isPaused(key) {
		return Result{Paused: true}, nil
	}
	s, todo, schemaRetry := e.takeDirty(ctx, key)
	if s == nil {
		return Result{}, nil
	}
	e.waitForLists(ctx, todo)
	var res Result
	if schemaRetry > 0 {
		res.requeueBy(schemaRetry)
	}
	reads, deferred, waits := e.readAhead(ctx, key, s, todo)
	errs := e.checkAll(ctx, s, todo, reads, deferred, &res)
	e.summarize(key, s, todo, &res)
	res.Reading = len(waits) > 0
	e.afterRelists(key, waits)
	return res, errors.Join(errs...)
}

// takeDirty takes the objects of key's set that its last events marked,
// and that key holds, in the order they are created. The merge rules of
// the set's kinds are fetched first: the first Sync of a kind waits for
// them, no event does. schemaRetry is when to try rules that failed again.
func (e *Engine) takeDirty(ctx context.Context, key string) (s *objectSet, todo []dirtyObject, schemaRetry time.Duration) {
	e.mu.Lock()
	if s = e.sets[key]; s == nil {
		e.mu.Unlock()
		return nil, nil, 0
	}
	gvs := s.groupVersions()
	e.mu.Unlock()
	schemaRetry = e.schemas.load(ctx, gvs)

	e.mu.Lock()
	if s = e.sets[key]; s == nil {
		e.mu.Unlock()
		return nil, nil, 0
	}
	acquire, notify := e.resolveLocked(key, s, nil, nil)
	todo = make([]dirtyObject, 0, len(s.dirty))
	for ref, at := range s.dirty {
		// An object another set holds is that set's to check.
		if e.holderLocked(ref) == key {
			todo = append(todo, dirtyObject{s.objects.get(ref), at})
		}
	}
	// A new map, not clear: a map keeps the room it grew to, and at the
	// first Sync every object is dirty.
	s.dirty = map[ObjectRef]int64{}
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}
	e.notifyAll(notify)
	// In the order kubectl and Helm create objects: a Namespace and a
	// CRD before what lives in them.
	slices.SortFunc(todo, func(a, b dirtyObject) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.ref().GVR.Resource, b.ref().GVR.Resource),
			cmp.Compare(a.ref().Namespace, b.ref().Namespace), cmp.Compare(a.ref().Name, b.ref().Name))
	})
	return s, todo, schemaRetry
}

// waitForLists waits for the first list of each type of todo.
func (e *Engine) waitForLists(ctx context.Context, todo []dirtyObject) {
	// Reading a type's objects from its informer beats a GET per object,
	// so a type whose informer is still listing (it was just acquired, or
	// the locker just started) is waited for while its list runs: a cold
	// start with tens of thousands of objects lists for many seconds, and
	// a GET each would cost as many requests as objects. A type whose list
	// fails, or is not served, is read one by one.
	waited := map[schema.GroupVersionResource]bool{}
	for _, obj := range todo {
		if gvr := obj.ref().GVR; !waited[gvr] {
			waited[gvr] = true
			wctx, cancel := context.WithTimeout(ctx, informerSyncWait)
			e.informers.WaitForList(wctx, gvr)
			cancel()
		}
	}
}

// checkAll brings each of todo in line, into res, but for the deferred
// types and namespaces' objects, which stay dirty.
func (e *Engine) checkAll(ctx context.Context, s *objectSet, todo []dirtyObject, reads readAhead, deferred map[typeNamespace]bool, res *Result) []error {
	var errs []error
	for _, obj := range todo {
		if deferred[typeNamespace{obj.ref().GVR, obj.ref().Namespace}] {
			continue
		}
		drift, err := e.syncObject(ctx, s, obj.lockedObject, reads)
		switch {
		case errors.Is(err, errNamespaceWaiting):
			res.Waiting = append(res.Waiting, Waiting{Ref: obj.ref(), Kind: drift.Kind, Namespace: obj.ref().Namespace})
			// The Namespace's own event syncs the set again; this
			// is in case its creation failed.
			res.requeueBy(namespaceWait)
			continue
		case errors.Is(err, errTypeWaiting):
			// The CRD's events sync the set again (see typesChanged).
			res.requeueBy(namespaceWait)
			continue
		case drift != nil:
			if drift.Corrected {
				drift.Latency = e.now().Sub(time.Unix(0, obj.marked))
			}
			if err != nil {
				drift.Err = err
			}
			res.Drifts = append(res.Drifts, *drift)
		}
		if err != nil {
			errs = append(errs, &ObjectError{Ref: obj.ref(), Err: err})
		}
	}
	return errs
}

// summarize completes res with where the whole set stands, and marks
// what is not in line dirty again.
func (e *Engine) summarize(key string, s *objectSet, todo []dirtyObject, res *Result) {
	drifted := make(map[ObjectRef]bool, len(res.Drifts))
	for _, d := range res.Drifts {
		drifted[d.Ref] = true
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, obj := range todo {
		if !obj.inLine {
			if _, again := s.dirty[obj.ref()]; !again {
				s.dirty[obj.ref()] = obj.marked
			}
		}
	}
	res.Objects = len(s.objects) + len(s.unresolved)
	res.InLine = len(s.unresolved) == 0
	res.Applied = int(s.applied)
	for _, obj := range s.objects {
		if holder := e.holderLocked(obj.ref()); holder != key {
			kind := ""
			if d, err := obj.declaration(); err == nil {
				kind = d.GetKind()
			}
			res.Conflicts = append(res.Conflicts, Conflict{Ref: obj.ref(), Kind: kind, Holder: holder})
			res.Objects--
			res.InLine = false
			continue
		}
		switch {
		case obj.expired:
			res.Finished = append(res.Finished, obj.ref())
		case obj.inLine:
			res.Locked++
		default:
			res.InLine = false
		}
		if p := obj.proof; p != nil && p.checked {
			res.Unverified = append(res.Unverified, p.Unverified)
		}
		if obj.drift == nil {
			continue
		}
		if obj.drift.drifted {
			res.Drifted++
		}
		// A fight shows while its object drifts, and in the Sync whose
		// correction started or continued it; once the object is back
		// in line and left alone, there is nothing to hold back, though
		// the backoff lasts.
		if f := obj.drift.fight; f != nil && now.Before(f.Until) && (!obj.inLine || drifted[obj.ref()]) {
			res.Fights = append(res.Fights, *f)
			res.requeueBy(f.Until.Sub(now))
		}
		if f := obj.drift.failure; f != nil {
			res.Failed = append(res.Failed, *f)
			res.requeueBy(f.RetryAt.Sub(now))
		}
		if u := obj.drift.unchecked; u != nil && !obj.inLine && !obj.expired {
			res.Unchecked = append(res.Unchecked, *u)
			res.requeueBy(u.RetryAt.Sub(now))
		}
	}
	sortFindings(res)
	e.summarizeTypes(s, res)
}

// sortFindings orders what a Sync found by object, for a stable report.
func sortFindings(res *Result) {
	sort.Slice(res.Fights, func(i, j int) bool { return res.Fights[i].Ref.String() < res.Fights[j].Ref.String() })
	sort.Slice(res.Unverified, func(i, j int) bool { return res.Unverified[i].Ref.String() < res.Unverified[j].Ref.String() })
	sort.Slice(res.Failed, func(i, j int) bool { return res.Failed[i].Ref.String() < res.Failed[j].Ref.String() })
	sort.Slice(res.Unchecked, func(i, j int) bool { return res.Unchecked[i].Ref.String() < res.Unchecked[j].Ref.String() })
	sort.Slice(res.Conflicts, func(i, j int) bool { return res.Conflicts[i].Ref.String() < res.Conflicts[j].Ref.String() })
}

// summarizeTypes reports the set's types that failed to resolve or are
// not watched now, with the first watch error, with e.mu held.
func (e *Engine) summarizeTypes(s *objectSet, res *Result) {
	for _, u := range s.unresolved {
		res.Unresolved = append(res.Unresolved, u.err)
	}
	for gvr := range s.gvrs {
		if !e.watching(gvr) {
			res.Unwatched = append(res.Unwatched, gvr)
			res.InLine = false
		}
	}
	sort.Slice(res.Unwatched, func(i, j int) bool { return res.Unwatched[i].String() < res.Unwatched[j].String() })
	for _, gvr := range res.Unwatched {
		if err := e.informers.Err(gvr); err != nil {
			res.WatchError = fmt.Errorf("watching %s: %w", gvr.GroupResource(), err)
			break
		}
	}
}

// requeueBy makes RequeueAfter at most d (and at least a millisecond: zero
// means no requeue).
func (r *Result) requeueBy(d time.Duration) {
	d = max(d, time.Millisecond)
	if r.RequeueAfter == 0 || d < r.RequeueAfter {
		r.RequeueAfter = d
	}
}

// informerSyncWait bounds how long Sync waits for a new informer's first
// list, while that list neither fails nor ends, before reading objects one
// by one: long enough for a list of 100,000 objects on a busy API server.
const informerSyncWait = 2 * time.Minute

// namespaceWait is when a set with objects waiting for a Namespace or a
// CRD it declares (see Waiting, errTypeWaiting) syncs again, unless that
// object's event comes first.
const namespaceWait = time.Second

// dirtyObject is an object a Sync checks, and when it was marked dirty.
type dirtyObject struct {
	*lockedObject
	marked int64
}

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
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
// for its namespace or its type. Backing off exponentially on each try
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
	ctx = withReadAhead(ctx, e.readAhead(ctx, todo))
	errs := e.checkAll(ctx, s, todo, &res)
	e.summarize(key, s, todo, &res)
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
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.ref.GVR.Resource, b.ref.GVR.Resource),
			cmp.Compare(a.ref.Namespace, b.ref.Namespace), cmp.Compare(a.ref.Name, b.ref.Name))
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
		if gvr := obj.ref.GVR; !waited[gvr] {
			waited[gvr] = true
			wctx, cancel := context.WithTimeout(ctx, informerSyncWait)
			e.informers.WaitForList(wctx, gvr)
			cancel()
		}
	}
}

// checkAll brings each of todo in line, into res.
func (e *Engine) checkAll(ctx context.Context, s *objectSet, todo []dirtyObject, res *Result) []error {
	var errs []error
	for _, obj := range todo {
		drift, err := e.syncObject(ctx, s, obj.lockedObject)
		switch {
		case errors.Is(err, errNamespaceWaiting):
			res.Waiting = append(res.Waiting, Waiting{Ref: obj.ref, Kind: drift.Kind, Namespace: obj.ref.Namespace})
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
			errs = append(errs, &ObjectError{Ref: obj.ref, Err: err})
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
			if _, again := s.dirty[obj.ref]; !again {
				s.dirty[obj.ref] = obj.marked
			}
		}
	}
	res.Objects = len(s.objects) + len(s.unresolved)
	res.InLine = len(s.unresolved) == 0
	for _, obj := range s.objects {
		if holder := e.holderLocked(obj.ref); holder != key {
			kind := ""
			if d, err := obj.declaration(); err == nil {
				kind = d.GetKind()
			}
			res.Conflicts = append(res.Conflicts, Conflict{Ref: obj.ref, Kind: kind, Holder: holder})
			res.Objects--
			res.InLine = false
			continue
		}
		switch {
		case obj.expired:
			res.Finished = append(res.Finished, obj.ref)
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
		if f := obj.drift.fight; f != nil && now.Before(f.Until) && (!obj.inLine || drifted[obj.ref]) {
			res.Fights = append(res.Fights, *f)
			res.requeueBy(f.Until.Sub(now))
		}
		if f := obj.drift.failure; f != nil {
			res.Failed = append(res.Failed, *f)
			res.requeueBy(f.RetryAt.Sub(now))
		}
	}
	sort.Slice(res.Fights, func(i, j int) bool { return res.Fights[i].Ref.String() < res.Fights[j].Ref.String() })
	sort.Slice(res.Unverified, func(i, j int) bool { return res.Unverified[i].Ref.String() < res.Unverified[j].Ref.String() })
	sort.Slice(res.Failed, func(i, j int) bool { return res.Failed[i].Ref.String() < res.Failed[j].Ref.String() })
	sort.Slice(res.Conflicts, func(i, j int) bool { return res.Conflicts[i].Ref.String() < res.Conflicts[j].Ref.String() })
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

// syncObject brings one object in line, and returns the drift it found, if
// any. obj.inLine says whether the object is in line afterwards; only the
// goroutine syncing obj's set writes obj. It reads in four steps: classify
// what the event left (observe), recreate what is gone, compare the live
// object with its declaration, and revert what differs.
func (e *Engine) syncObject(ctx context.Context, s *objectSet, obj *lockedObject) (*Drift, error) {
	o, err := e.observe(ctx, obj)
	if err != nil || o.settled {
		return nil, err
	}
	if o.live == nil {
		return e.recreate(ctx, s, obj, o.declared)
	}
	c, err := e.compare(ctx, s.spec, obj, o)
	if err != nil {
		return nil, err
	}
	if c.patch == nil {
		if !s.spec.ReportOnly {
			if err := e.handOver(ctx, s.spec, obj, o.live); err != nil {
				return nil, err
			}
		}
		obj.settle()
		return nil, nil
	}
	return e.revert(ctx, s, obj, o.live, o.declared, c)
}

// observed is what observe found of a locked object.
type observed struct {
	// settled is set when nothing is left to do: the object is in line,
	// is a version the engine's own write replaced, or is a finished Job
	// its TTL deleted.
	settled bool
	// live is the object as it is, nil when it does not exist.
	live     *unstructured.Unstructured
	declared *unstructured.Unstructured
	// fresh is set when the object may not have been compared since its
	// declaration or the last write (see lockedObject.fresh).
	fresh bool
}

// observe reads obj as it is and classifies it.
func (e *Engine) observe(ctx context.Context, obj *lockedObject) (observed, error) {
	obj.inLine = false
	live, inLine, err := e.live(ctx, obj)
	o := observed{fresh: obj.fresh}
	if err == nil {
		obj.fresh = false
	}
	if inLine {
		obj.settle()
		return observed{settled: true}, nil
	}
	notFound := apierrors.IsNotFound(err)
	if err != nil && !notFound {
		return o, err
	}
	if !notFound {
		if rv := live.GetResourceVersion(); rv != "" && obj.superseded(rv) {
			obj.settle()
			return observed{settled: true}, nil
		}
	}
	if o.declared, err = obj.declaration(); err != nil {
		return o, err
	}
	if notFound && obj.finished.Load() {
		// Its TTL deleted it, as Kubernetes is meant to.
		obj.expired = true
		return observed{settled: true}, nil
	}
	obj.expired = false
	if !notFound {
		obj.finished.Store(finishedWithTTL(live))
		o.live = live
	}
	return o, nil
}

// recreate creates a locked object that does not exist.
func (e *Engine) recreate(ctx context.Context, s *objectSet, obj *lockedObject, declared *unstructured.Unstructured) (*Drift, error) {
	if obj.proof != nil {
		// Only the owner creates what it declares; what the last
		// verified declaration had is recreated as it had it.
		obj.proof.missing()
		return e.holdFallback(ctx, s, obj, nil)
	}
	drift := &Drift{Ref: obj.ref, Kind: declared.GetKind(), Deleted: true, Applying: obj.applying}
	return drift, e.correct(ctx, s, obj, drift, "", func() error { return e.create(ctx, s.spec, obj, declared) })
}

// comparison is how a live object differs from its declaration.
type comparison struct {
	rules   mergeRules
	desired map[string]any
	// patch makes live desired; nil when it is in line.
	patch *mergePatch
	// refused is the API server's refusal of the correction in the dry
	// run canonicalize made: the write would get it too, so it is not
	// sent.
	refused error
}

// compare works out what o.live should be, and the patch that makes it so.
func (e *Engine) compare(ctx context.Context, spec ObjectSet, obj *lockedObject, o observed) (comparison, error) {
	rules, changes := e.schemas.rulesAt(obj.ref.GVR.GroupVersion())
	fresh := o.fresh
	if changes != obj.rulesSeen {
		obj.rulesSeen = changes
		fresh, obj.canonical = true, false
	}
	live, declared := o.live, o.declared
	c := comparison{rules: rules}
	if rules.holds(live.Object, declared.Object) {
		return c, nil
	}
	var err error
	if c.desired, err = obj.desired(rules, live.Object, declared.Object); err != nil {
		return c, err
	}
	if c.patch, err = computePatch(live.Object, c.desired); err != nil {
		return c, err
	}
	// A mismatch where the declaration may just be in another form than
	// the stored one is dry-run once (see canonicalize); an unverified
	// object's is, by the dry run its verification makes.
	if c.patch != nil && fresh && !obj.canonical && obj.proof == nil {
		obj.canonical = true
		canon, err := e.canonicalize(ctx, spec, obj, rules, declared, c.patch)
		if permanentReason(err) != "" {
			c.refused = err
		}
		if err == nil {
			if c.desired, err = obj.desired(rules, live.Object, canon.Object); err != nil {
				return c, err
			}
			if c.patch, err = computePatch(live.Object, c.desired); err != nil {
				return c, err
			}
		}
	}
	if c.patch != nil && obj.noop(live.GetResourceVersion(), string(c.patch.Data)) {
		c.patch = nil
	}
	return c, nil
}

// revert writes c's patch to obj, once the drift is verified as someone
// else's (see Verification) and unless the set only reports.
func (e *Engine) revert(ctx context.Context, s *objectSet, obj *lockedObject, live, declared *unstructured.Unstructured, c comparison) (*Drift, error) {
	spec := s.spec
	if obj.proof != nil {
		verified, err := e.verify(ctx, spec, obj, live, c.desired, c.patch)
		if err != nil || obj.inLine {
			return nil, err
		}
		if !verified {
			return e.holdFallback(ctx, s, obj, live)
		}
	}
	k := c.rules.kindOf(c.desired)
	paths := k.driftPaths(live.Object, c.desired)
	drift := &Drift{Ref: obj.ref, Kind: declared.GetKind(), Paths: paths, Managers: attribute(live, k, paths, e.fieldManager), Applying: obj.applying}
	return drift, e.correct(ctx, s, obj, drift, live.GetResourceVersion(), func() error {
		if spec.BeforeWrite != nil {
			if err := spec.BeforeWrite(ctx, Write{Ref: obj.ref, Live: live, Restores: restores(live.Object, c.desired, paths)}); err != nil {
				return err
			}
		}
		if c.refused != nil {
			return shortRefusal("patching", c.refused)
		}
		out, err := e.writer(spec, obj.ref).Patch(ctx, obj.ref.Name, c.patch.Type, c.patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager})
		if err != nil {
			return shortRefusal("patching", err)
		}
		if rv := live.GetResourceVersion(); rv != "" && out.GetResourceVersion() == rv {
			obj.writes().noop = &noopPatch{resourceVersion: live.GetResourceVersion(), data: string(c.patch.Data)}
		}
		drift.Paths = k.storedKeys(drift.Paths, out.Object)
		obj.writes().superseded = []string{live.GetResourceVersion()}
		obj.fresh = true
		return e.handOver(ctx, spec, obj, out)
	})
}

// correct runs write for a drift unless the set only reports, or a fight
// holds the object back. version is the drifted resourceVersion ("" for a
// deleted object): a drift already reported at that version, while it
// stays uncorrected, is not reported again.
func (e *Engine) correct(ctx context.Context, s *objectSet, obj *lockedObject, drift *Drift, version string, write func() error) error {
	spec := s.spec
	now := e.now()
	if obj.drift == nil {
		obj.drift = &driftState{}
	}
	d := obj.drift
	seen := d.drifted && d.version == version
	d.drifted, d.version = true, version
	if d.fight != nil && now.Before(d.fight.Until) {
		drift.Held = true
		return nil
	}
	if spec.ReportOnly {
		if seen {
			drift.Held = true
			return nil
		}
		e.countDrift(d, drift, now)
		return nil
	}
	if f := d.failure; f != nil && now.Before(f.RetryAt) {
		drift.Held = true
		return nil
	}
	if err := write(); err != nil {
		reason := permanentReason(err)
		if reason == ReasonNamespaceNotFound && s.namespaces[obj.ref.Namespace] {
			// The set's own Namespace is on its way.
			return errNamespaceWaiting
		}
		if version == "" && reason == "" && apierrors.IsNotFound(err) && s.kinds[schema.GroupKind{Group: obj.ref.GVR.Group, Kind: drift.Kind}] {
			return errTypeWaiting
		}
		if reason == "" {
			d.failure = nil
			return err
		}
		// Reported once: a retry that fails alike is held, not
		// reported again.
		again := d.failure != nil && d.failure.Reason == reason && d.failure.Err.Error() == err.Error()
		d.failure = &Failure{Ref: obj.ref, Kind: drift.Kind, Reason: reason, Err: err, RetryAt: now.Add(PermanentRetry)}
		if again {
			drift.Held = true
			return nil
		}
		drift.Err = err
		return nil
	}
	d.failure = nil
	if obj.proof == nil {
		// An unverified object held at its fallback is not in line.
		obj.settle()
	}
	drift.Corrected = true
	e.countDrift(d, drift, now)
	return nil
}

// countDrift records a reported drift at now. Past FightThreshold drifts
// within FightWindow, or while a fight is under way, it holds the object's
// next correction back, doubling the wait each time up to MaxFightBackoff,
// so the writes to one object are bounded whatever another actor does. A
// fight is over once the object stays alone for FightWindow after a hold.
func (e *Engine) countDrift(d *driftState, drift *Drift, now time.Time) {
	if d.fight != nil && now.Sub(d.fight.Until) > e.opts.FightWindow {
		d.fight, d.backoff = nil, 0
	}
	kept := d.times[:0]
	for _, t := range d.times {
		if now.Sub(t) < e.opts.FightWindow {
			kept = append(kept, t)
		}
	}
	d.times = append(kept, now)
	if d.fight == nil && len(d.times) <= e.opts.FightThreshold {
		return
	}
	if d.backoff == 0 {
		d.backoff = e.opts.FightBackoff
	} else {
		d.backoff = min(2*d.backoff, e.opts.MaxFightBackoff)
	}
	managers := drift.Managers
	if d.fight != nil && len(managers) == 0 {
		managers = d.fight.Managers
	}
	d.fight = &Fight{Ref: drift.Ref, Kind: drift.Kind, Managers: managers, Paths: drift.Paths, Until: now.Add(d.backoff)}
}

// create recreates a deleted object from its declaration. For a set owned
// by a server-side-apply manager it applies as that manager, so that the
// owner's next apply finds every field its own.
func (e *Engine) create(ctx context.Context, spec ObjectSet, obj *lockedObject, declared *unstructured.Unstructured) error {
	if spec.BeforeWrite != nil {
		if err := spec.BeforeWrite(ctx, Write{Ref: obj.ref, Restores: true}); err != nil {
			return err
		}
	}
	var err error
	if spec.ApplyManager != "" {
		_, err = e.writer(spec, obj.ref).Apply(ctx, obj.ref.Name, declared, metav1.ApplyOptions{FieldManager: obj.applyManagerOr(spec.ApplyManager), Force: true})
	} else {
		_, err = e.writer(spec, obj.ref).Create(ctx, declared, metav1.CreateOptions{FieldManager: e.fieldManager})
	}
	if err != nil {
		// AlreadyExists means the cache was behind; the event that
		// brings it up to date marks the object dirty again.
		return shortRefusal("creating", err)
	}
	obj.fresh = true
	return nil
}

// handOver moves ownership of the fields the engine wrote to the set's
// server-side-apply manager, with a JSON patch of managedFields alone (see
// ObjectSet.ApplyManager). The patch carries the resourceVersion, so it
// fails rather than overwrite a concurrent change; the event of that change
// brings the object back to Sync.
func (e *Engine) handOver(ctx context.Context, spec ObjectSet, obj *lockedObject, live *unstructured.Unstructured) error {
	if spec.ApplyManager == "" {
		return nil
	}
	if m := applyManagerOf(live, e.fieldManager, spec.ApplyManager); m != "" {
		obj.applyManager = m
	}
	if !hasUpdateEntry(live, e.fieldManager) {
		return nil
	}
	manager := obj.applyManagerOr(spec.ApplyManager)
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(e.fieldManager), manager)
	if err != nil || patch == nil {
		return err
	}
	_, err = e.writer(spec, obj.ref).Patch(ctx, obj.ref.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: e.fieldManager})
	switch {
	case apierrors.IsConflict(err):
		// Someone wrote since live was read; the event of that write
		// brings the object back, and the hand-over is retried then.
		return nil
	case err != nil:
		return fmt.Errorf("handing fields over to field manager %q: %w", manager, err)
	}
	// live is now older than the object the hand-over wrote.
	w := obj.writes()
	w.superseded = append(w.superseded, live.GetResourceVersion())
	return nil
}

// hasUpdateEntry reports whether manager has an Update entry on obj.
func hasUpdateEntry(obj *unstructured.Unstructured, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationUpdate {
			return true
		}
	}
	return false
}

// applyManagerOf returns the Apply field manager of obj other than own,
// preferring preferred when there are several.
func applyManagerOf(obj *unstructured.Unstructured, own, preferred string) string {
	found := ""
	for _, f := range obj.GetManagedFields() {
		if f.Operation != metav1.ManagedFieldsOperationApply || f.Subresource != "" || f.Manager == own {
			continue
		}
		if f.Manager == preferred {
			return f.Manager
		}
		if found == "" {
			found = f.Manager
		}
	}
	return found
}

// applyManagerOr returns the Apply field manager last seen on the object,
// or the set's if none was.
func (o *lockedObject) applyManagerOr(set string) string {
	if o.applyManager != "" {
		return o.applyManager
	}
	return set
}

// live returns the object from the informer cache, or from the API server
// while the cache is not synced, does not hold it, or holds a stale stand-in. inLine is true,
// with no object, when the cache says the object was as declared by obj's
// current declaration when last stored.
func (e *Engine) live(ctx context.Context, obj *lockedObject) (live *unstructured.Unstructured, inLine bool, err error) {
	ref := obj.ref
	if p := obj.proof; p != nil && !p.checked {
		// The first check of an unverified object decides what the
		// owner applied (see Verification), so it reads the object as
		// it is now: the cache may not show the owner's writes yet,
		// though the declaration that followed them has arrived.
		live, err = e.resource(ref).Get(ctx, ref.Name, metav1.GetOptions{})
		return live, false, err
	}
	cached, exists, synced, err := e.cached(ref.GVR, ref.Namespace, ref.Name)
	// The cache does not hold objects that were untracked at their last
	// event, so a missing object is looked up: it may have been created
	// while no release locked it. A deleted object costs one GET more.
	if err == nil && synced && exists {
		switch c := cached.(type) {
		case *unstructured.Unstructured:
			return c, false, nil
		case *inLineStub:
			if c.generation == obj.generation {
				return nil, true, nil
			}
		}
	}
	if read, ok := readAheadFrom(ctx).get(ref); ok {
		if read == nil {
			return nil, false, apierrors.NewNotFound(schema.GroupResource{Group: ref.GVR.Group, Resource: ref.GVR.Resource}, ref.Name)
		}
		return read, false, nil
	}
	live, err = e.resource(ref).Get(ctx, ref.Name, metav1.GetOptions{})
	return live, false, err
}

// restores reports whether desired has, at one of the drifted paths, a
// field live lacks, or a list with more entries.
func restores(live, desired map[string]any, paths []string) bool {
	for _, text := range paths {
		p, err := ParsePointer(text)
		if err != nil {
			continue
		}
		lv, inLive := p.get(live)
		dv, inDesired := p.get(desired)
		if !inLive && inDesired {
			return true
		}
		ll, ok1 := lv.([]any)
		dl, ok2 := dv.([]any)
		if ok1 && ok2 && len(dl) > len(ll) {
			return true
		}
	}
	return false
}

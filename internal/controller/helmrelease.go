package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/lock"
)

// releaseState is what the controller remembers of one CR between syncs.
// Only the worker syncing the CR's key touches it.
type releaseState struct {
	release v1alpha1.ReleaseKey
	// holds says this CR held release at its last decide: it lost no
	// Conflict. Only then are the release's series its own to forget;
	// one that lost holds none, and the holder's go on.
	holds bool
	held
	bookkeeping
	verifying
	// own are this controller's writes to the CR that its cache may not
	// show yet.
	own ownWrites
	// rejected is the last release Secret found invalid.
	rejected rejectedSecret
	// settled is set once the lock reported a state other than
	// Transitioning (see Controller.unsettled).
	settled bool
	// arrived is set once the release was declared, or handed over to
	// be (see Controller.arrive).
	arrived bool
}

// held is what the lock holds: its state, and the revision declared to the
// engine.
type held struct {
	lock lock.Lock
	// rel is the decoded revision the lock holds, read from the Secret
	// with secretUID at secretVersion.
	rel           *storage.Release
	secretUID     types.UID
	secretVersion string
	// generation is the CR generation whose spec was declared.
	generation int64
	// optedOut are the manifest's objects left out of the lock.
	optedOut []v1alpha1.ObjectProblem
	// stuck, if set, is the Helm operation that outlasted the timeout;
	// the lock holds the last verified revision meanwhile.
	stuck *stuckRevision
}

// bookkeeping is what the lock has reported, and what waits to be.
type bookkeeping struct {
	// fights maps each object held back by a fight to the end of the
	// hold last reported, so each hold is reported once.
	fights map[engine.ObjectRef]time.Time
	// counted is set once the drift counts were read from the CR's
	// status; the controller keeps them from then on, since the cached
	// CR may not show its last status write yet.
	counted                   bool
	driftsDetected, corrected int64
	lastDrift                 *v1alpha1.Drift
	// pending are drift events held back, and flushAt when they and the
	// drift counts are written (zero when nothing waits); see
	// bookkeepingDelay.
	pending []pendingEvent
	flushAt time.Time
	// flushSince is when the held-back bookkeeping began, and flushDrifts
	// the drift count flushAt was set for (see nextFlush).
	flushSince  time.Time
	flushDrifts int64
	// turned is set once the held-back bookkeeping fell due and took
	// its turn in the budget all releases share (see bookkeepingRate);
	// flushAt is then when that turn comes.
	turned bool
	// announced is the revision the Locked event was recorded for.
	announced int
	// unheld counts the events past maxPendingEvents, by type and reason.
	unheld map[pendingEvent]int
	// warned are the unverified objects warned about, by message, so
	// that each finding is announced once.
	warned map[string]bool
}

// verifying is what the lock trusts of the release's storage (see
// verification): the last verified revision, and the revision held while
// it is verified.
type verifying struct {
	trust     trust
	candidate *candidate
}

// lockedElsewhere returns the name of another HelmRelease of this
// controller that names the same release and came first, if any: one
// release has one lock, or two CRs would report, and write, for it twice.
// The oldest CR holds it; a tie goes to the first name. A shard sees its
// own CRs only (Config.Selector), so two CRs of one release in different
// shards both hold it: the README says to keep them in one shard.
func (c *Controller) lockedElsewhere(hr *v1alpha1.HelmRelease) string {
	crs, err := c.crs.GetIndexer().ByIndex(byRelease, hr.Spec.Release.Namespace+"/"+hr.Spec.Release.Name)
	if err != nil {
		return ""
	}
	// first reports whether a CR created at t named a came before one
	// created at u named b.
	first := func(t metav1.Time, a string, u metav1.Time, b string) bool {
		return t.Before(&u) || (t.Equal(&u) && a < b)
	}
	holder, heldSince := "", metav1.Time{}
	for _, obj := range crs {
		other, err := meta.Accessor(obj)
		if err != nil || other.GetName() == hr.Name {
			continue
		}
		if owner := other.GetAnnotations()[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
			continue
		}
		created, name := other.GetCreationTimestamp(), other.GetName()
		if first(created, name, hr.CreationTimestamp, hr.Name) && (holder == "" || first(created, name, heldSince, holder)) {
			holder, heldSince = name, created
		}
	}
	return holder
}

func crReleaseIndex(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *v1alpha1.HelmRelease:
		return []string{o.Spec.Release.Namespace + "/" + o.Spec.Release.Name}, nil
	case *unstructured.Unstructured:
		name, _, _ := unstructured.NestedString(o.Object, "spec", "release", "name")
		ns, _, _ := unstructured.NestedString(o.Object, "spec", "release", "namespace")
		return []string{ns + "/" + name}, nil
	}
	return nil, nil
}

// releaseSync is one sync of a HelmRelease: the request every kind of lock
// carries, with the CR, what the controller remembers of it, and the lock
// as the sync found it.
type releaseSync struct {
	syncRequest
	hr     *v1alpha1.HelmRelease
	st     *releaseState
	before lock.Lock
}

// newReleaseSync starts a sync of key's HelmRelease hr; r collects what it
// asks of the queue.
func (c *Controller) newReleaseSync(key lockKey, hr *v1alpha1.HelmRelease, st *releaseState, r *result) *releaseSync {
	return &releaseSync{
		syncRequest: syncRequest{key: key, lock: &st.lock, result: r,
			// Without current CR and Secret caches, an upgrade that
			// opens the lock, or a new CR spec, can go unseen.
			caches: []ownCache{{v1alpha1.Resource, c.crsHealth}, {secretsResource, c.secretsHealth}}},
		hr: hr, st: st, before: st.lock,
	}
}

// syncHelmRelease brings a HelmRelease's lock in line: observe the CR and
// its release, decide what the lock holds, act on the objects, and report.
func (c *Controller) syncHelmRelease(ctx context.Context, key lockKey) (result, error) {
	hr, st, ok := c.observe(ctx, key)
	if !ok {
		return result{}, nil
	}
	if c.readOnly.Load() {
		// Promoted, this replica syncs what it declared here at once
		// (see arrive).
		st.arrived = true
		held := st.rel
		_, _, err := c.decide(ctx, c.newReleaseSync(key, hr, st, &result{}))
		if st.rel != held {
			// A new declaration: its kinds' rules, for Judge.
			c.engine.Prepare(ctx)
		}
		c.engine.Standby(key.String())
		return result{}, err
	}
	if c.arrive(key, st) {
		return result{}, nil
	}
	if err := c.claimIfFree(ctx, hr, st); err != nil {
		return result{}, err
	}
	var res result
	req := c.newReleaseSync(key, hr, st, &res)
	status, open, err := c.decide(ctx, req)
	if err != nil {
		return result{}, err
	}
	awaiting := false
	var syncErr error
	if !open {
		status, awaiting, syncErr = c.act(ctx, req)
	}
	return c.report(ctx, req, status, awaiting, syncErr)
}

// observe reads key's HelmRelease from the cache and its state, and
// reports false when there is nothing to hold: the CR is gone or another
// locker serves it, and the lock is opened and forgotten.
func (c *Controller) observe(ctx context.Context, key lockKey) (*v1alpha1.HelmRelease, *releaseState, bool) {
	obj, exists, err := c.crs.GetIndexer().GetByKey(key.ObjectName.String())
	if err != nil || !exists {
		c.open(key)
		c.dropState(key)
		return nil, nil, false
	}
	hr, ok := obj.(*v1alpha1.HelmRelease)
	if !ok {
		hr = &v1alpha1.HelmRelease{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, hr); err != nil {
			// The CRD's schema makes this unreachable for CRs it admitted.
			klog.FromContext(ctx).Error(err, "Cannot read HelmRelease; ignoring it")
			return nil, nil, false
		}
	} else {
		hr = hr.DeepCopy()
	}
	if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
		// Another locker serves it.
		c.open(key)
		c.dropState(key)
		return nil, nil, false
	}
	st := c.state(key)
	if st.release != hr.Spec.Release {
		c.open(key)
		// The series of the release it held before name a lock that is
		// gone.
		c.forgetRelease(st)
		*st = releaseState{release: hr.Spec.Release, settled: st.settled}
	}
	st.own.apply(hr)
	if !st.counted {
		st.counted = true
		st.driftsDetected, st.corrected, st.lastDrift = hr.Status.DriftsDetected, hr.Status.DriftsCorrected, hr.Status.LastDrift.DeepCopy()
		if v := hr.Status.Verified; v != nil && v.Release == hr.Spec.Release {
			record := *v
			st.trust.verified = &record
		}
	}
	return hr, st, true
}

// report writes what a sync found: events, metrics and the status, which
// waits, with the drift bookkeeping, while only the counts changed or the
// lock awaits its own corrections (see bookkeepingDelay).
func (c *Controller) report(ctx context.Context, req *releaseSync, status v1alpha1.HelmReleaseStatus, awaiting bool, syncErr error) (result, error) {
	key, hr, st, res := req.key, req.hr, req.st, *req.result
	status.DriftsDetected, status.DriftsCorrected = st.driftsDetected, st.corrected
	if st.lastDrift != nil {
		status.LastDrift = st.lastDrift
	}
	status.LastDenied = c.lastDenied(key, hr.Status.LastDenied)
	if st.trust.verified != nil {
		status.Verified = st.trust.verified
	}
	if !st.settled && status.State != v1alpha1.StateTransitioning {
		st.settled = true
		c.unsettled.Add(-1)
	}
	c.reportRender(key, hr, st, &status)
	c.reportFailedUpgrade(hr, st, &status)
	c.lockEvents(hr, req.before, st, status)
	c.cfg.Metrics.ObserveRelease(key.ObjectName.String(), st.lock.Phase == lock.Locked, status.LockedObjects)
	c.cfg.Metrics.ObserveHelmOperation(key.ObjectName.String(), st.stuck != nil && !st.stuck.upgradeFailed)
	// While the lock awaits only its own corrections, the status it
	// would write now (Reconciling) would be overwritten a moment later,
	// so it waits like the bookkeeping does.
	wait := awaiting || onlyBookkeeping(hr.Status, status)
	if d := st.holdFor(time.Now(), wait, c.bookkeeping); d > 0 {
		res.requeueBy(d)
		return res, syncErr
	}
	wrote, err := c.writeStatus(ctx, hr, status)
	if errors.Is(err, errLabelsChanged) {
		// Nothing is written, the held-back events included, until
		// the cache shows whether the CR is still this shard's.
		res.requeueBy(labelsChangedRetry)
		return res, syncErr
	}
	if err != nil {
		return res, errors.Join(syncErr, err)
	}
	if wrote {
		st.own.wroteStatus(hr, status)
	}
	c.flushEvents(crRef(hr), &st.bookkeeping)
	st.flushAt, st.turned = time.Time{}, false
	return res, syncErr
}

// nextFlush is when bookkeeping held back since since is written, now that
// more came: bookkeepingDelay after the last drift, so that a burst costs
// one status write and one event per reason, but no later than
// maxBookkeepingDelay after the first, so that a drift that goes on is
// still reported.
func nextFlush(since, now time.Time) time.Time {
	at := now.Add(bookkeepingDelay)
	if limit := since.Add(maxBookkeepingDelay); at.After(limit) {
		return limit
	}
	return at
}

// holdFor is how long the status a sync would write waits, zero when it is
// written now; wait says it carries only bookkeeping. Bookkeeping waits
// until nextFlush, then for its turn in budget; once it has a turn, more
// drift does not push it back.
func (b *bookkeeping) holdFor(now time.Time, wait bool, budget *rate.Limiter) time.Duration {
	if !wait && len(b.pending) == 0 {
		return 0
	}
	if b.flushAt.IsZero() {
		b.flushSince = now
	}
	if !b.turned && (b.flushAt.IsZero() || b.driftsDetected != b.flushDrifts) {
		b.flushAt, b.flushDrifts = nextFlush(b.flushSince, now), b.driftsDetected
	}
	if !wait {
		return 0
	}
	if !b.turned && !now.Before(b.flushAt) {
		b.turned = true
		b.flushAt = now.Add(budget.ReserveN(now, 1).DelayFrom(now))
	}
	return max(0, b.flushAt.Sub(now))
}

// onlyBookkeeping reports whether next differs from the written status in
// the drift record and counts alone, which may wait (see bookkeepingDelay).
func onlyBookkeeping(written, next v1alpha1.HelmReleaseStatus) bool {
	n := *next.DeepCopy()
	n.LastDrift, n.DriftsDetected, n.DriftsCorrected = written.LastDrift, written.DriftsDetected, written.DriftsCorrected
	return !sameStatus(written, next) && sameStatus(written, n)
}

// act syncs the engine with the declared revision and builds the status
// to report. It also returns whether the lock awaits only the watch events
// of its own corrections (see awaitingOwnWrites), and an error to retry on.
func (c *Controller) act(ctx context.Context, req *releaseSync) (status v1alpha1.HelmReleaseStatus, awaiting bool, err error) {
	hr, st := req.hr, req.st
	req.revision = st.rel.Version
	err = c.afterSync(ctx, &req.syncRequest, func(res engine.Result, syncErr error) {
		if syncErr == nil && len(res.Unresolved) == 0 && len(res.Unverified) == 0 {
			st.verified(res.Applied > 0)
		}
		c.reportDrifts(ctx, &hr.Spec.Release, &st.bookkeeping, res)
		c.reportUnverified(hr, st, res)
		status = lockedStatus(hr, st, res, syncErr)
		if s := st.stuck; s != nil {
			setConditions(&status.LockStatus, hr.Generation, condition(v1alpha1.ConditionReady, false, s.reason(), s.message(c.cfg.HelmOperationTimeout, st.rel.Version)))
		}
		// awaitingOwnWrites holds only with nothing Unresolved, so
		// syncErr stands for the error returned.
		awaiting = syncErr == nil && awaitingOwnWrites(res)
	})
	return status, awaiting, err
}

// awaitingOwnWrites reports whether the objects of res that are not in line
// are all ones this Sync corrected, so the lock settles as soon as the
// watch shows those writes.
func awaitingOwnWrites(res engine.Result) bool {
	corrected := 0
	for _, d := range res.Drifts {
		if d.Corrected && d.Err == nil {
			corrected++
		}
	}
	return !res.InLine && corrected > 0 && res.Drifted == 0 && len(res.Fights) == 0 &&
		len(res.Unresolved) == 0 && len(res.Unwatched) == 0 && res.Locked+corrected == res.Objects
}

// openState opens the lock and lets go of its objects: the CR no longer
// stands for a release whose objects Helm keeps (it names none, another
// CR holds the release, the release is gone or uninstalled), and another
// lock that declares one of them takes it over.
func (c *Controller) openState(key lockKey, st *releaseState) {
	c.open(key)
	st.opened()
}

// pauseState opens the lock and keeps its objects (see engine.Pause): it
// checks and writes nothing, and another lock that declares one of them
// stays in Conflict. Helm is changing them, or is expected to (a failed
// revision is retried or rolled back), or the user said to leave them
// alone (spec.suspend); a lock that took one over would write its own
// declaration over Helm's, and Helm 4's next server-side apply would
// conflict with the locker's field manager. A revision that cannot be
// read pauses too: writing a bad Secret must not hand the objects to
// another lock. The next revision declared ends the pause.
func (c *Controller) pauseState(ctx context.Context, key lockKey, hr *v1alpha1.HelmRelease, st *releaseState) {
	if !c.engine.Pause(key.String()) {
		c.pauseVerified(ctx, key, hr, st)
	}
	st.opened()
}

// pauseVerified declares the last verified revision of hr's release and
// pauses it at once (see engine.Engine.Pause). It is for a lock that opens
// with nothing declared: the locker started, or took over as leader, while
// Helm works on the release, after a revision failed or while the CR is
// suspended. The lock then keeps the objects it held before, and a
// ManifestLock that declares one of them waits in Conflict rather than
// write over Helm. Nothing is checked or written. Without a verified
// revision whose Secret still holds the verified manifest, nothing is
// held: a Secret writer cannot make the lock keep what Helm never applied.
func (c *Controller) pauseVerified(ctx context.Context, key lockKey, hr *v1alpha1.HelmRelease, st *releaseState) {
	rk := hr.Spec.Release
	v := st.trust.verified
	if v == nil || v.Release != rk {
		return
	}
	objs := c.verifiedObjects(ctx, rk.Namespace, *v)
	if objs == nil {
		return
	}
	objs, _ = declare.SplitOptedOut(objs)
	c.declareSet(key, engine.ObjectSet{
		Objects:          objs,
		DefaultNamespace: rk.Namespace,
		Prevent:          hr.Spec.Mode == v1alpha1.ModePrevent,
		Since:            hr.CreationTimestamp.Time,
	})
	c.engine.Pause(key.String())
	klog.FromContext(ctx).V(2).Info("Holding the verified revision's objects while the lock is open", "release", rk.Namespace+"/"+rk.Name, "revision", v.Revision, "objects", len(objs))
}

// opened forgets what the lock reported of the held revision (fights,
// warnings) and the revision it was verifying: the next declaration
// starts afresh.
func (st *releaseState) opened() {
	st.held = held{lock: st.lock.Next(lock.Event{Type: lock.Open})}
	st.fights, st.warned = nil, nil
	st.candidate = nil
}

// state returns what the controller remembers of key's HelmRelease,
// nothing at first.
func (c *Controller) state(key lockKey) *releaseState {
	return c.states.GetOrCreate(key, func() *releaseState {
		c.unsettled.Add(1)
		return &releaseState{}
	})
}

// dropState forgets key's HelmRelease: its state, its last denial, and
// its metrics, those of the release it held included (see forgetRelease).
func (c *Controller) dropState(key lockKey) {
	c.twoway.Forget(key.ObjectName)
	st, ok := c.states.Delete(key)
	c.cfg.Metrics.ForgetRelease(key.ObjectName.String())
	if ok {
		if !st.settled {
			c.unsettled.Add(-1)
		}
		c.forgetRelease(st)
	}
	c.denials.Delete(key)
}

// forgetRelease deletes the series of the release st names, if this CR
// held it: a CR that lost a Conflict wrote none of them, and deleting or
// moving it must not silence the holder's.
func (c *Controller) forgetRelease(st *releaseState) {
	if st.holds {
		c.cfg.Metrics.ForgetLock(st.release.Namespace, st.release.Name)
	}
}

// claimIfFree claims hr for this controller unless it is claimed already.
func (c *Controller) claimIfFree(ctx context.Context, hr *v1alpha1.HelmRelease, st *releaseState) error {
	if hr.Annotations[v1alpha1.ManagedByAnnotation] != "" {
		return nil
	}
	rv, err := c.claim(ctx, hr)
	if err != nil {
		return err
	}
	st.own.claimed(hr, c.cfg.ControllerName, rv)
	return nil
}

// claim writes this controller's name into the managed-by annotation.
// It returns the resourceVersion the claim made.
func (c *Controller) claim(ctx context.Context, hr *v1alpha1.HelmRelease) (string, error) {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ManagedByAnnotation, c.cfg.ControllerName)
	claimed, err := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace(hr.Namespace).Patch(ctx, hr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("claiming HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return claimed.GetResourceVersion(), nil
}

// kinds returns the kinds of objs, each once, for the series created at 0
// (see metrics.HoldRelease).
func kinds(objs []*unstructured.Unstructured) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range objs {
		if k := o.GetKind(); k != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

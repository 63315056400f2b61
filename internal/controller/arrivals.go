package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// A HelmRelease created after the start is declared by its first sync,
// after the engine's informers listed the types of its objects: they
// kept none of them, so the sync scans its namespaces or waits for its
// types to be listed again. That is cheap for one CR. For many created at
// once (a GitOps tool registering every release in one apply, a platform
// team locking them all) it cost a GET of each release Secret, a scan or
// a relist for each few releases, and a status write for each sync that
// found its objects not all read yet: a burst of 500 releases took twice
// as long as a start with the same CRs. So a first sync hands its lock to
// arrivals instead, which gathers the locks that come together and
// declares them as a start does (see admitArrivals): their Secrets
// listed a page at a time, then one list of each type for all of them.
// Their syncs follow, and find everything in the caches.

// arrivalQuiet is how long arrivals waits after the last lock came for
// another before it declares what it gathered, and arrivalGather the
// most it waits from the first. A burst's CRs come through the CR
// informer within milliseconds of one another on an idle machine, but
// a tenth of a second apart, now and then, on a busy one (a CI runner
// with other tests beside it split a burst of 26 that way); a lone CR
// waits arrivalQuiet longer to be locked. A burst that keeps coming
// (thousands of CRs an apply creates for seconds) is gathered whole, up
// to arrivalGather: a gathering lists each namespace's release Secrets
// once and each type once, so each one a burst is split into costs
// those lists again.
const (
	arrivalQuiet  = 300 * time.Millisecond
	arrivalGather = 5 * time.Second
)

// arrivalJoin is how long from its start a gathering being declared takes
// in the locks that come meanwhile. Their syncs, and those of the locks
// gathered first, wait for the declaring to end: a stream of CRs that kept
// coming would hold them all back for as long as it lasted.
const arrivalJoin = time.Minute

// arrivalSyncWait is the most a gathering that came during the start
// waits for the informers' first lists before it has the engine relist
// what they dropped.
const arrivalSyncWait = 2 * time.Minute

// arrivalBatch is the fewest locks arriving together that are declared as
// a start does. Fewer are synced at once: each finds its objects with a
// scan of its namespaces (see engine.Engine.Sync), which costs less than
// a list of each type of the cluster's objects.
const arrivalBatch = 16

// arrivals are the locks handed over by their first sync, gathered to be
// declared together. A lock it holds is not synced by the workers until
// it is queued again.
type arrivals struct {
	mu   sync.Mutex
	held map[lockKey]bool
	// next is what came since the last batch was taken, in order.
	next []lockKey
	last time.Time
	wake chan struct{}
	// join is arrivalJoin but in tests.
	join time.Duration
}

func newArrivals() *arrivals {
	return &arrivals{held: map[lockKey]bool{}, wake: make(chan struct{}, 1), join: arrivalJoin}
}

// add takes key over.
func (a *arrivals) add(key lockKey, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[key] {
		return
	}
	a.held[key] = true
	a.next = append(a.next, key)
	a.last = now
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// holds reports whether key waits in arrivals: a worker must then leave
// its state alone.
func (a *arrivals) holds(key lockKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[key]
}

// due returns how long to wait before the gathered locks are taken, from
// now, given when the first of them came: zero once arrivalQuiet has
// passed since the last, or arrivalGather since the first.
func (a *arrivals) due(first, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(0, min(a.last.Add(arrivalQuiet).Sub(now), first.Add(arrivalGather).Sub(now)))
}

// take returns what was gathered; the locks stay held until done.
func (a *arrivals) take() []lockKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := a.next
	a.next = nil
	return keys
}

// done lets the workers have keys again.
func (a *arrivals) done(keys []lockKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range keys {
		delete(a.held, key)
	}
}

// arrive hands key's first sync to arrivals, and reports whether it did:
// for a leader past its start's declaring, a HelmRelease whose release no
// sync has declared yet. CRs created while the locker starts (applied
// with it, by the same GitOps tool) arrive so too, before the informers
// have listed.
func (c *Controller) arrive(key lockKey, st *releaseState) bool {
	if st.arrived || st.rel != nil || !c.declaredAll.Load() {
		return false
	}
	st.arrived = true
	c.arrivals.add(key, time.Now())
	return true
}

// admitArrivals gathers the locks that arrive together and declares each
// gathering as a start does (see admit), then queues them for their
// syncs. It returns when ctx is done.
func (c *Controller) admitArrivals(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.arrivals.wake:
		}
		first := time.Now()
		for d := c.arrivals.due(first, first); d > 0; d = c.arrivals.due(first, time.Now()) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		keys := c.arrivals.take()
		if len(keys) == 0 {
			// Woken by locks that joined the last gathering.
			continue
		}
		klog.FromContext(ctx).V(2).Info("Gathered the HelmReleases that arrived", "count", len(keys), "gathered", time.Since(first), "together", len(keys) >= arrivalBatch)
		if len(keys) >= arrivalBatch {
			keys = c.admit(ctx, keys)
		}
		c.arrivals.done(keys)
		for _, key := range keys {
			c.queue.Add(key)
		}
	}
}

// admit declares keys' locks as declareAll does at a start, and has the
// engine list once each type whose objects they hold it had not kept.
// Locks that arrive while it declares join the gathering before that
// list, as the rest of a burst that came apart: declared alone they
// would each scan their namespaces. It returns every lock it declared.
func (c *Controller) admit(ctx context.Context, keys []lockKey) []lockKey {
	began := time.Now()
	var all []lockKey
	// A burst into a locker that holds nothing yet (every release
	// registered in one apply after it was installed) declares the
	// objects of types no informer watches: they start once the whole
	// gathering is declared, and list once.
	release := c.engine.HoldInformers()
	for len(keys) > 0 {
		c.declareArrived(ctx, keys)
		all = append(all, keys...)
		if time.Since(began) >= c.arrivals.join {
			break
		}
		keys = c.arrivals.take()
	}
	release()
	declaredAt := time.Now()
	sets := make([]string, 0, len(all))
	for _, key := range all {
		sets = append(sets, key.String())
	}
	// Declared while the informers still list, the sets' objects may
	// have been dropped by the first lists: Relist finds those missing
	// once the lists are done. An informer that cannot list (the locker
	// may not read its type) is not waited for past arrivalSyncWait.
	for wait := time.Now().Add(arrivalSyncWait); !c.synced.Load() && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return all
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.engine.Relist(ctx, sets)
	klog.FromContext(ctx).V(2).Info("Declared the HelmReleases that arrived together", "count", len(all),
		"declared", declaredAt.Sub(began), "listed", time.Since(declaredAt))
	return all
}

// declareArrived declares keys' locks from their deployed release
// Secrets listed together, and the rest one by one.
func (c *Controller) declareArrived(ctx context.Context, keys []lockKey) {
	batch := map[lockKey]bool{}
	var releases []string
	for _, key := range keys {
		batch[key] = true
		if obj, exists, err := c.crs.GetIndexer().GetByKey(key.ObjectName.String()); err == nil && exists {
			release, _ := crReleaseIndex(obj)
			releases = append(releases, release...)
		}
	}
	// Resolved page by page, as at a start: a set is resolved as it is
	// declared only when the engine has read its kinds' merge rules, and
	// in a locker that held nothing before the burst it has read none.
	// Unresolved, every release's parsed manifest would be held until the
	// whole gathering was declared.
	prepare := func() { c.engine.Prepare(ctx) }
	declared := c.declareDeployed(ctx, releases, func(key lockKey) bool { return batch[key] }, prepare)
	var rest []lockKey
	for _, key := range keys {
		if !declared[key] {
			rest = append(rest, key)
		}
	}
	c.declareKeys(ctx, rest)
	prepare()
}

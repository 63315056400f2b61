package leader

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/informers"
)

// standby is the state of a replica waiting for the Lease.
type standby struct {
	e   *Elector
	obs observation
	// w is the watch on the Lease; nil when there is none.
	w watch.Interface
	// rv is where the next watch starts: the last resourceVersion seen.
	rv string
	// watchedAt is when the last watch was opened. A watch is opened at
	// most once a retry period, so one that keeps failing costs little.
	watchedAt time.Time
	// retryAt is, after a failed request, the earliest time for the next.
	retryAt time.Time
	// conflicts counts failed takeovers in a row: two back off.
	conflicts int
	// unavailable is set while the last request failed because the API
	// server was unavailable, and Config.Readiness is set: the next one
	// waits for it to be ready rather than for a retry period. readyAt is
	// when the API server last said it was; a request that fails within
	// a retry period of that waits a retry period, so that an API server
	// ready yet failing is asked at the usual pace.
	unavailable bool
	readyAt     time.Time
}

// readinessPoll is how often a standby asks whether the API server is back.
const readinessPoll = 250 * time.Millisecond

// standBy watches the Lease until this replica takes it, and returns the
// first term of its leadership, or ctx's error.
func (e *Elector) standBy(ctx context.Context) (*term, error) {
	s := &standby{e: e}
	defer s.stopWatch()
	for {
		t, err := s.act(ctx)
		if t != nil || err != nil {
			return t, err
		}
		var events <-chan watch.Event
		if s.w != nil {
			events = s.w.ResultChan()
		}
		fire, stop := e.timer(s.wake())
		e.block(ctx)
		select {
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case ev, ok := <-events:
			if !ok {
				s.stopWatch()
			} else {
				s.handle(ctx, ev)
			}
		case <-fire:
		}
		stop()
	}
}

// act makes the requests the standby's state calls for now: read the Lease
// if its state is unknown, take it if it is free, watch it if no watch is
// open. It returns a term once the Lease is taken, and nil when nothing is
// left to do but wait. Errors are logged and retried after a retry period;
// only ctx's end is returned.
func (s *standby) act(ctx context.Context) (*term, error) {
	e := s.e
	logger := klog.FromContext(ctx)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := e.clock.Now()
		if now.Before(s.retryAt) {
			return nil, nil
		}
		if s.unavailable {
			if !e.cfg.Readiness.Ready(ctx) {
				s.retryAt = now.Add(readinessPoll)
				return nil, nil
			}
			s.unavailable, s.readyAt = false, now
		}
		if !s.obs.known {
			lease, err := e.get(ctx)
			if err != nil {
				s.failed(ctx, now, "Reading the leader Lease; retrying", err)
				return nil, nil
			}
			s.see(ctx, lease)
			if lease != nil {
				s.rv = lease.ResourceVersion
			}
		}
		if !now.Before(s.obs.freeAt(e.cfg.Identity, e.cfg.LeaseDuration)) {
			t, err := e.acquire(ctx, s.obs.lease)
			switch {
			case t != nil:
				logger.Info("Took the leader Lease", "lease", e.describe(), "identity", e.cfg.Identity, "from", holderOf(s.obs.lease))
				return t, nil
			case err == nil:
				// Someone wrote the Lease first; read it again and
				// decide afresh. Twice in a row backs off.
				s.obs.known = false
				if s.conflicts++; s.conflicts > 1 {
					s.conflicts = 0
					s.retryAt = now.Add(e.cfg.RetryPeriod)
				}
				continue
			default:
				s.failed(ctx, now, "Taking the leader Lease; retrying", err)
				return nil, nil
			}
		}
		s.conflicts = 0
		if s.w == nil && !now.Before(s.watchedAt.Add(e.cfg.RetryPeriod)) {
			s.watchedAt = now
			w, err := e.watch(ctx, s.rv)
			if err != nil {
				s.failed(ctx, now, "Watching the leader Lease; retrying", err)
				return nil, nil
			}
			s.w = w
		}
		return nil, nil
	}
}

// failed schedules the retry of a request that failed at now: once the API
// server is ready if it was unavailable and Config.Readiness can tell,
// otherwise a retry period later.
func (s *standby) failed(ctx context.Context, now time.Time, msg string, err error) {
	e := s.e
	if e.cfg.Readiness != nil && informers.Unavailable(err) && (s.readyAt.IsZero() || now.Sub(s.readyAt) >= e.cfg.RetryPeriod) {
		klog.FromContext(ctx).Error(err, msg, "lease", e.describe(), "retry", "once the API server is ready")
		s.unavailable, s.retryAt = true, now.Add(readinessPoll)
		return
	}
	klog.FromContext(ctx).Error(err, msg, "lease", e.describe(), "retryIn", e.cfg.RetryPeriod)
	s.retryAt = now.Add(e.cfg.RetryPeriod)
}

// wake is when the standby must act next, short of a watch event: after a
// failed request, once it may ask again; otherwise when the Lease expires,
// or sooner if the watch must be opened again.
func (s *standby) wake() time.Time {
	if s.unavailable || s.e.clock.Now().Before(s.retryAt) {
		return s.retryAt
	}
	at := s.obs.freeAt(s.e.cfg.Identity, s.e.cfg.LeaseDuration)
	if s.w == nil {
		if again := s.watchedAt.Add(s.e.cfg.RetryPeriod); again.Before(at) {
			at = again
		}
	}
	return at
}

// handle applies one watch event.
func (s *standby) handle(ctx context.Context, ev watch.Event) {
	if ev.Type == watch.Error {
		klog.FromContext(ctx).V(2).Info("The leader Lease's watch failed; reading it again", "lease", s.e.describe(), "err", apierrors.FromObject(ev.Object))
		s.stopWatch()
		s.obs.known = false
		return
	}
	obj, err := meta.Accessor(ev.Object)
	if err != nil {
		return
	}
	s.rv = obj.GetResourceVersion()
	lease, ok := ev.Object.(*coordinationv1.Lease)
	if !ok || lease.Name != s.e.cfg.Name {
		return // a bookmark, or not our Lease
	}
	switch ev.Type {
	case watch.Added, watch.Modified:
		s.see(ctx, lease)
	case watch.Deleted:
		s.see(ctx, nil)
	}
}

// see records the Lease as seen now, and logs a change of holder.
func (s *standby) see(ctx context.Context, lease *coordinationv1.Lease) {
	if !s.obs.see(lease, s.e.clock.Now()) {
		return
	}
	logger := klog.FromContext(ctx)
	switch holder := holderOf(lease); holder {
	case "":
		logger.V(2).Info("The leader Lease is free", "lease", s.e.describe())
	case s.e.cfg.Identity:
	default:
		logger.Info("Another replica leads; standing by", "lease", s.e.describe(), "leader", holder)
	}
}

func (s *standby) stopWatch() {
	if s.w != nil {
		s.w.Stop()
		s.w = nil
	}
}

// get reads the Lease; nil if it does not exist.
func (e *Elector) get(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	lease, err := e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return lease, err
}

// watch watches the one Lease from resourceVersion rv.
func (e *Elector) watch(ctx context.Context, rv string) (watch.Interface, error) {
	return e.leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", e.cfg.Name).String(),
		ResourceVersion:     rv,
		AllowWatchBookmarks: true,
	})
}

// acquire writes this replica into the Lease, prev as last seen (nil: none
// exists). It returns the new term, or nil and no error if another write
// came first (a conflict): the caller reads the Lease again.
func (e *Elector) acquire(ctx context.Context, prev *coordinationv1.Lease) (*term, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	now := e.clock.Now()
	want := acquired(prev, e.leaseMeta(), e.cfg.Identity, e.cfg.LeaseDuration, now)
	var got *coordinationv1.Lease
	var err error
	if prev == nil {
		got, err = e.leases.Create(ctx, want, metav1.CreateOptions{})
	} else {
		got, err = e.leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		return &term{lease: got, renewedAt: now}, nil
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		return nil, nil
	default:
		return nil, err
	}
}

package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// errNotHolder says the Lease names another holder, or is gone.
var errNotHolder = errors.New("the Lease no longer names this replica")

// lead runs run while renewing the Lease every retry period (earlier while
// the work is busy; see Config.Busy), until ctx is done, run returns, or
// the Lease is lost. run has always returned when lead does.
func (e *Elector) lead(ctx context.Context, t *term, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	logger.Info("Leading", "lease", e.describe(), "identity", e.cfg.Identity)
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	stop := func() error {
		cancelRun()
		return <-done
	}

	var retryAt time.Time // after a failed renewal, when to try again
	for {
		deadline := t.renewedAt.Add(e.cfg.RenewDeadline)
		next := e.nextRenewal(t, retryAt)
		if next.After(deadline) {
			next = deadline
		}
		fire, stopTimer := e.timer(next)
		e.block(ctx)
		select {
		case <-ctx.Done():
			stopTimer()
			err := stop()
			e.release(ctx, t)
			return err
		case err := <-done:
			// Also taken when ctx is done and the work returned
			// at once: a stop, not a failure.
			stopTimer()
			e.release(ctx, t)
			if err == nil && ctx.Err() == nil {
				err = errors.New("stopped leading: the work ended on its own")
			}
			return err
		case <-fire:
		}
		now := e.clock.Now()
		if !now.Before(deadline) {
			_ = stop()
			return fmt.Errorf("%w %s: not renewed within %s", ErrLost, e.describe(), e.cfg.RenewDeadline)
		}
		if retryAt.IsZero() && e.cfg.Busy != nil && now.Before(t.renewedAt.Add(e.cfg.RetryPeriod)) && !e.cfg.Busy() {
			continue // an early look, and the work is idle
		}
		switch err := e.renew(ctx, t, deadline.Sub(now)); {
		case err == nil:
			retryAt = time.Time{}
		case errors.Is(err, errNotHolder):
			_ = stop()
			return fmt.Errorf("%w %s: %v", ErrLost, e.describe(), err)
		case ctx.Err() != nil:
			// Shutting down; the select above releases the Lease.
		default:
			now := e.clock.Now()
			logger.Error(err, "Renewing the leader Lease; retrying", "lease", e.describe(), "deadlineIn", deadline.Sub(now), "retryIn", renewRetry)
			retryAt = now.Add(renewRetry)
		}
	}
}

// nextRenewal is when the leader next renews: after a failed renewal, at
// retryAt; otherwise a retry period after the last one. With Config.Busy
// set, the leader also looks, from the half of the period on, whether the
// work is busy, and renews at the first look that finds it so.
func (e *Elector) nextRenewal(t *term, retryAt time.Time) time.Time {
	if !retryAt.IsZero() {
		return retryAt
	}
	due := t.renewedAt.Add(e.cfg.RetryPeriod)
	if e.cfg.Busy == nil {
		return due
	}
	look := t.renewedAt.Add(e.cfg.RetryPeriod / 2)
	if now := e.clock.Now(); !now.Before(look) {
		look = now.Add(max(e.cfg.RetryPeriod/busyLooks, time.Millisecond))
	}
	if look.Before(due) {
		return look
	}
	return due
}

// renew moves the Lease's renewTime to now with one Update guarded by the
// resourceVersion this replica last wrote. On a conflict it reads the
// Lease: if it still names this replica (an earlier renewal that timed out
// here but succeeded there), it renews again from what it read; otherwise
// the Lease is lost. Nothing it sends outlives timeout, the time left
// before the renew deadline.
func (e *Elector) renew(ctx context.Context, t *term, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := e.clock.Now()
	got, err := e.leases.Update(ctx, renewed(t.lease, e.cfg.LeaseDuration, now), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		var current *coordinationv1.Lease
		if current, err = e.stillHeld(ctx); err != nil {
			return err
		}
		got, err = e.leases.Update(ctx, renewed(current, e.cfg.LeaseDuration, now), metav1.UpdateOptions{})
	}
	if apierrors.IsNotFound(err) {
		return errNotHolder
	}
	if err != nil {
		return err
	}
	t.lease, t.renewedAt = got, now
	return nil
}

// stillHeld reads the Lease and returns it if it names this replica, or
// errNotHolder.
func (e *Elector) stillHeld(ctx context.Context) (*coordinationv1.Lease, error) {
	current, err := e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errNotHolder
	}
	if err != nil {
		return nil, err
	}
	if holder := holderOf(current); holder != e.cfg.Identity {
		return nil, fmt.Errorf("%w: it names %q", errNotHolder, holder)
	}
	return current, nil
}

// release gives the Lease up, so that a standby takes it at once instead of
// waiting for it to expire. It is called once the work has stopped, and
// tries until the Lease would have expired anyway.
func (e *Elector) release(ctx context.Context, t *term) {
	logger := klog.FromContext(ctx)
	left := t.renewedAt.Add(e.cfg.LeaseDuration).Sub(e.clock.Now())
	if left <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
	defer cancel()
	_, err := e.leases.Update(ctx, released(t.lease, e.clock.Now()), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		var current *coordinationv1.Lease
		if current, err = e.stillHeld(ctx); err == nil {
			_, err = e.leases.Update(ctx, released(current, e.clock.Now()), metav1.UpdateOptions{})
		}
	}
	switch {
	case err == nil:
		logger.Info("Released the leader Lease", "lease", e.describe())
	case errors.Is(err, errNotHolder), apierrors.IsNotFound(err):
	default:
		logger.Error(err, "Releasing the leader Lease; standbys take over when it expires", "lease", e.describe())
	}
}

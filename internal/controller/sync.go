package controller

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/lock"
)

// syncRequest is what the phases of one lock's sync share, whatever its
// kind: the key, the lock's state machine and the revision it holds, the
// controller's own caches it depends on, and what the sync asks of the
// queue.
type syncRequest struct {
	key lockKey
	// lock is the kind's state's lock, which afterSync steps, and
	// revision the declaration it holds.
	lock     *lock.Lock
	revision int
	// caches are the controller's own caches the lock cannot be held
	// without (see afterSync).
	caches []ownCache
	// result collects what every phase of the sync asks of the loop that
	// owns the queue.
	result *result
}

// ownCache is one of the controller's own caches, named by the resource it
// lists.
type ownCache struct {
	resource schema.GroupVersionResource
	health   *informers.Health
}

// readingWait is when a lock whose objects wait for a relist (see
// engine.Result.Reading) syncs again if the engine has not synced it by
// then: a relist of 100,000 objects takes a few seconds.
const readingWait = 30 * time.Second

// afterSync is the step after the declaration, the same for every kind of
// lock: it syncs the objects declared for req.key, counts the caches of
// req.caches that do not see changes as they happen as unwatched, steps
// the lock with lock.Checked, and asks for the requeue the engine wants.
// report then reads the result, the sync's own error with it, and builds
// the kind's status and events. The error returned is to retry on: the
// sync's, or else the kinds not served yet (Unresolved): CRD events retry
// those at once, and backing off covers a discovery that lags behind the
// CRD.
func (c *Controller) afterSync(ctx context.Context, req *syncRequest, report func(res engine.Result, syncErr error)) error {
	res, err := c.engine.Sync(ctx, req.key.String())
	if res.Reading && err == nil && len(res.Drifts) == 0 {
		// The engine syncs the lock again once its objects are read
		// (see engine.Result.Reading), within a relist; a status now
		// would only say that they are not checked yet. A sync that
		// corrected or created objects reports them (a ManifestLock's
		// inventory holds what it created). readingWait is in case
		// that sync is lost.
		req.result.requeueBy(readingWait)
		return nil
	}
	for _, cache := range req.caches {
		if !cache.health.Current() {
			res.Unwatched, res.InLine = append(res.Unwatched, cache.resource), false
		}
	}
	before := *req.lock
	complete := err == nil && len(res.Unresolved) == 0 && len(res.Unverified) == 0 && len(res.Failed) == 0
	*req.lock = req.lock.Next(lock.Event{Type: lock.Checked, Revision: req.revision, Complete: complete, InLine: res.InLine})
	if *req.lock != before {
		klog.FromContext(ctx).V(2).Info("Lock state changed", "from", before.Phase, "to", req.lock.Phase, "revision", req.lock.Revision)
	}
	req.result.requeueBy(res.RequeueAfter)
	report(res, err)
	if err == nil && len(res.Unresolved) > 0 {
		err = errors.Join(res.Unresolved...)
	}
	return err
}

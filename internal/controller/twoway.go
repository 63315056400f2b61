package controller

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/twoway"
	"github.com/helm-locker/helm-locker/lock"
)

// Renderer renders charts again, for spec.rerender (see twoway.Renderer).
type Renderer = twoway.Renderer

// EventRenderChanged is the event of a chart that renders differently now
// than its locked revision stores.
const EventRenderChanged = twoway.EventRenderChanged

// Defaults of Config.RerenderUpgradeInterval and
// Config.RerenderUpgradeMaxPerHour.
const (
	DefaultRerenderUpgradeInterval   = twoway.DefaultUpgradeInterval
	DefaultRerenderUpgradeMaxPerHour = twoway.DefaultUpgradeMaxPerHour
)

// twoWayConfig is what the controller's two-way locking renders and
// upgrades with.
func (c *Controller) twoWayConfig() twoway.Config {
	return twoway.Config{
		ControllerName:    c.cfg.ControllerName,
		DefaultRerender:   c.cfg.DefaultRerender,
		UpgradeInterval:   c.cfg.RerenderUpgradeInterval,
		UpgradeMaxPerHour: c.cfg.RerenderUpgradeMaxPerHour,
		Kube:              c.cfg.Kube,
		Mapper:            c.cfg.Mapper,
		REST:              c.cfg.REST,
		Recorder:          c.cfg.Recorder,
		Metrics:           c.cfg.Metrics,
		Renderer:          c.cfg.Renderer,
		Charts:            twoWayCharts{c},
	}
}

// reportRender tells two-way locking what key's lock holds after a sync,
// and sets the Rendered condition and status.rerender from its last
// render.
func (c *Controller) reportRender(key lockKey, hr *v1alpha1.HelmRelease, st *releaseState, status *v1alpha1.HelmReleaseStatus) {
	l := twoway.Lock{Release: hr.Spec.Release, Mode: c.twoway.Mode(hr), Writer: c.serviceAccount(hr),
		Holding: st.lock.Holding(), Reconciling: st.lock.Phase == lock.Reconciling, ChartRef: chartRefOf(hr)}
	if v := st.trust.verified; v != nil && v.Release == hr.Spec.Release {
		l.Chart = chartOf(v)
	}
	rep := c.twoway.Trust(key.ObjectName, l)
	switch {
	case rep.Off:
		removeCondition(&status.Conditions, v1alpha1.ConditionRendered)
		status.Rerender = nil
	case rep.Status != nil:
		setConditions(&status.LockStatus, hr.Generation, rep.Rendered)
		status.Rerender = rep.Status
	case rep.Waiting && status.Rerender == nil:
		setConditions(&status.LockStatus, hr.Generation, rep.Rendered)
	}
}

func removeCondition(conds *[]metav1.Condition, typ string) {
	*conds = slices.DeleteFunc(*conds, func(c metav1.Condition) bool { return c.Type == typ })
}

// reportFailedUpgrade writes what is remembered of the last upgrade Helm
// failed for the release hr's lock holds into its status, so that it
// outlives this process. A CR that lost a Conflict holds nothing, and
// writes nothing of it.
func (c *Controller) reportFailedUpgrade(hr *v1alpha1.HelmRelease, st *releaseState, status *v1alpha1.HelmReleaseStatus) {
	if !st.holds {
		return
	}
	status.FailedUpgrade = nil
	if f, ok := c.twoway.FailedUpgrade(hr.Spec.Release); ok {
		status.FailedUpgrade = &f
	}
}

// restoreFailedUpgrades tells two-way locking the failed upgrades that
// the CRs' statuses record: a restarted locker, or a new leader, then
// neither tries them again for the same render nor opens a lock on a
// revision one left failed (see twoway.Renders.FailedByUpgrade). It runs
// before any lock is decided.
func (c *Controller) restoreFailedUpgrades() {
	for _, obj := range c.crs.GetStore().List() {
		hr, ok := obj.(*v1alpha1.HelmRelease)
		if !ok || hr.Status.FailedUpgrade == nil || hr.Status.FailedUpgrade.Release != hr.Spec.Release {
			continue
		}
		if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
			continue
		}
		c.twoway.RememberFailedUpgrade(*hr.Status.FailedUpgrade)
	}
}

// twoWayLocks is what two-way locking reads of the controller.
type twoWayLocks struct{ c *Controller }

var _ twoway.Locks = twoWayLocks{}

func (l twoWayLocks) HelmRelease(key cache.ObjectName) (*v1alpha1.HelmRelease, bool) {
	obj, exists, err := l.c.crs.GetIndexer().GetByKey(key.String())
	if err != nil || !exists {
		return nil, false
	}
	// A CR the cache could not convert (see compact) is none.
	hr, ok := obj.(*v1alpha1.HelmRelease)
	return hr, ok
}

func (l twoWayLocks) ServiceAccount(hr *v1alpha1.HelmRelease) string {
	return l.c.serviceAccount(hr)
}

func (l twoWayLocks) Writer(namespace, name string) (dynamic.Interface, error) {
	return l.c.writerFor(namespace, name)
}

func (l twoWayLocks) LatestRevision(ctx context.Context, rk v1alpha1.ReleaseKey) (twoway.Revision, error) {
	latest, err := l.c.readLatest(ctx, rk)
	return twoway.Revision{Number: latest.revision, Status: latest.status, UID: latest.uid}, err
}

// Settled: renders wait until no HelmRelease's lock is unsettled (see
// Controller.unsettled) and the lock queue is empty, so that they take no
// CPU from a cold start's locks.
func (l twoWayLocks) Settled() bool {
	return l.c.unsettled.Load() == 0 && l.c.queue.Len() == 0
}

func (l twoWayLocks) Resync(key cache.ObjectName) {
	l.c.queue.Add(helmReleaseKey(key.Namespace, key.Name))
}

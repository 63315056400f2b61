package controller

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/throttle"
	"github.com/helm-locker/helm-locker/internal/upgrade"
)

// Defaults of Config.RerenderUpgradeInterval and
// Config.RerenderUpgradeMaxPerHour.
const (
	DefaultRerenderUpgradeInterval   = throttle.DefaultInterval
	DefaultRerenderUpgradeMaxPerHour = throttle.DefaultMaxPerHour
)

// upgrader upgrades a release to its chart rendered now, as the identity
// as impersonates, and returns the new revision. Upgrade mode's upgrades
// go through it; the unit tests count them with a fake.
type upgrader interface {
	Upgrade(ctx context.Context, as *rest.Config, rel *render.Release) (int, error)
}

// helmUpgrader upgrades through the SDK of the Helm that wrote the
// revision, whose code the render that decided on it used.
type helmUpgrader struct{}

func (helmUpgrader) Upgrade(ctx context.Context, as *rest.Config, rel *render.Release) (int, error) {
	given, err := rel.AsHelm3()
	if err != nil {
		return 0, err
	}
	upgraded, err := upgrade.Upgrade(ctx, as, given, upgrade.Options{Helm: rel.Helm})
	if err != nil {
		return 0, err
	}
	return upgraded.Version, nil
}

var _ upgrader = helmUpgrader{}

// upgradeStep is what a render leads Upgrade mode to do.
type upgradeStep int

const (
	// noUpgrade: the chart renders as stored; or it is Report mode, or
	// the CR no longer asks for Upgrade as the render's writer; or this
	// render was upgraded to already.
	noUpgrade upgradeStep = iota
	// upgradeFailedBefore: Helm failed the upgrade to this very render
	// (status.failedUpgrade); it is reported, not tried again.
	upgradeFailedBefore
	// upgradeThrottled: the release was upgraded too recently, or too
	// often this hour; the render is queued again for when it may be.
	upgradeThrottled
	// upgradeNow: the release is upgraded to the render.
	upgradeNow
)

// upgradeDecision is what decideUpgrade decided, with what the step
// reports.
type upgradeDecision struct {
	step upgradeStep
	// failed is the failure of upgradeFailedBefore.
	failed v1alpha1.FailedUpgrade
	// held is the throttle's answer of upgradeThrottled.
	held throttle.Decision
}

// decideUpgrade decides what a render of target that found res leads
// Upgrade mode to do; upgraded is the render last tried. Its one side
// effect is the throttle's: the upgrade it lets through is counted, and
// the caller makes it at once.
func (c *Controller) decideUpgrade(key lockKey, target renderTarget, res *renderResult, upgraded string) upgradeDecision {
	if !res.stale {
		return upgradeDecision{step: noUpgrade}
	}
	if f, ok := c.failedUpgrades.Get(target.release); ok && f.RenderDigest == res.digest {
		return upgradeDecision{step: upgradeFailedBefore, failed: f}
	}
	if target.mode != v1alpha1.RerenderUpgrade || upgraded == res.digest || !c.stillUpgrades(key, target) {
		return upgradeDecision{step: noUpgrade}
	}
	if d := c.upgrades.Allow(target.release); !d.Allowed {
		return upgradeDecision{step: upgradeThrottled, held: d}
	}
	return upgradeDecision{step: upgradeNow}
}

// stillUpgrades reports whether key's HelmRelease, as the CR cache shows
// it now, still asks to upgrade target's release as target's writer. A
// render keeps the mode and writer it was queued with: an admin who
// switched the CR to Report or Off, suspended it, or named another writer
// while it rendered must not get its upgrade.
func (c *Controller) stillUpgrades(key lockKey, target renderTarget) bool {
	obj, exists, err := c.crs.GetIndexer().GetByKey(key.ObjectName.String())
	if err != nil || !exists {
		return false
	}
	// A CR the cache could not convert (see compact) asks for nothing.
	hr, ok := obj.(*v1alpha1.HelmRelease)
	if !ok {
		return false
	}
	if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
		return false
	}
	return !hr.Spec.Suspend && hr.Spec.Release == target.release &&
		c.rerenderOf(hr) == v1alpha1.RerenderUpgrade && c.serviceAccount(hr) == target.writer
}

// reportUpgrade sets what d reports on res, the render key's lock
// reports next, with rs.mu held; for upgradeNow it notes the render as
// tried.
func (c *Controller) reportUpgrade(key lockKey, rs *renderState, target renderTarget, res *renderResult, d upgradeDecision) {
	switch d.step {
	case upgradeFailedBefore:
		// The render the upgrade failed with, again (as after Helm
		// rolled the failure back, or the locker restarted).
		res.status.Cause = d.failed.Cause
		res.cond = upgradeFailedCondition(d.failed.Cause, d.failed.Error)
	case upgradeThrottled:
		res.cond = upgradeThrottledCondition(res.cond.Message, d.held, c.cfg.RerenderUpgradeMaxPerHour)
		c.cfg.Metrics.ObserveRender(target.release.Namespace, target.release.Name, "UpgradeThrottled", 0)
		if !rs.throttledUntil.Equal(d.held.Next) {
			// Once per hold, not at every render while it lasts.
			rs.throttledUntil = d.held.Next
			c.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name},
				corev1.EventTypeWarning, v1alpha1.ReasonUpgradeThrottled, truncate(res.cond.Message, maxEventMessage))
		}
	case upgradeNow:
		rs.upgraded = res.digest
	}
}

// upgradeAsDecided makes the upgrade d decided on, and returns when to
// render key's release again: when an upgrade held back may be made, so
// that it is made without another change.
func (c *Controller) upgradeAsDecided(ctx context.Context, key lockKey, rs *renderState, target renderTarget, res *renderResult, rel *render.Release, d upgradeDecision) time.Duration {
	switch d.step {
	case upgradeThrottled:
		return max(d.held.Next.Sub(c.clock.Now()), time.Millisecond)
	case upgradeNow:
		c.upgrade(ctx, key, rs, target, res, rel)
	}
	return 0
}

// upgrade upgrades the release with its chart rendered now, as the lock's
// write identity. A failure is recorded (status.failedUpgrade) in place of
// the last one, reported, and leaves the last deployed revision held; a
// success forgets the last failure. Until then the lock holds past the
// revision that failure left, if Helm writes nothing this time.
func (c *Controller) upgrade(ctx context.Context, key lockKey, rs *renderState, target renderTarget, res *renderResult, rel *render.Release) {
	logger := klog.FromContext(ctx)
	rk := target.release
	start := time.Now()
	cfg := rest.CopyConfig(c.cfg.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: impersonated(rk.Namespace, target.writer)}
	revision, err := c.upgrader.Upgrade(ctx, cfg, rel)
	var failed v1alpha1.FailedUpgrade
	if err != nil {
		failed = v1alpha1.FailedUpgrade{Release: rk, RenderDigest: res.digest, Cause: truncate(res.status.Cause, maxFailedUpgradeCause),
			Error: truncate(err.Error(), v1alpha1.MaxFailedUpgradeError), Time: metav1.NewTime(c.clock.Now())}
		// A revision Helm left failed (the upgrade's, or the
		// rollback's after it) would open the lock; the lock holds
		// the verified one instead.
		if latest, readErr := c.readLatest(ctx, rk); readErr == nil && latest.revision > rel.Version && latest.status == string(release.StatusFailed) {
			failed.Revision, failed.SecretUID = latest.revision, string(latest.uid)
		}
		// The lock's next sync writes it into the status, which
		// outlives this process (see restoreFailedUpgrades).
		c.failedUpgrades.Set(rk, failed)
	} else {
		c.failedUpgrades.Delete(rk)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.result != res {
		return
	}
	if err != nil {
		logger.Error(err, "Upgrade mode's upgrade failed; the last deployed revision stays held")
		c.cfg.Metrics.ObserveRender(rk.Namespace, rk.Name, "UpgradeFailed", time.Since(start))
		res.cond = upgradeFailedCondition(failed.Cause, failed.Error)
		c.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name},
			corev1.EventTypeWarning, v1alpha1.ReasonUpgradeFailed, truncate(res.cond.Message, maxEventMessage))
		return
	}
	logger.Info("Upgraded the release to the chart's new render", "newRevision", revision)
	c.cfg.Metrics.ObserveRender(rk.Namespace, rk.Name, "Upgraded", time.Since(start))
	res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonUpgraded,
		limit(fmt.Sprintf("%s; upgraded the release to revision %d with the new render", res.status.Cause, revision)))
}

// maxFailedUpgradeCause bounds status.failedUpgrade.cause, as the CRD
// does.
const maxFailedUpgradeCause = 1024

// upgradeFailedCondition says that Upgrade mode's upgrade for cause failed
// with Helm's error failure.
func upgradeFailedCondition(cause, failure string) metav1.Condition {
	return condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonUpgradeFailed,
		limit(fmt.Sprintf("%s; upgrading the release to the new render failed, and is not tried again for this cause: %s", cause, failure)))
}

// upgradeThrottledCondition says what the render found, stale says, and
// that the upgrade waits until held.Next, and why.
func upgradeThrottledCondition(stale string, held throttle.Decision, maxPerHour int) metav1.Condition {
	why := fmt.Sprintf("the release was upgraded at %s, and is upgraded at most once every %s (--rerender-upgrade-interval, doubled while the cause keeps changing)",
		held.Last.UTC().Format(time.RFC3339), held.Interval)
	if held.Capped {
		why = fmt.Sprintf("the release was upgraded %d times within the hour (--rerender-upgrade-max-per-hour)", maxPerHour)
	}
	return condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonUpgradeThrottled,
		limit(fmt.Sprintf("%s; the upgrade is held back until %s, and then made if the chart still renders differently: %s", stale, held.Next.UTC().Format(time.RFC3339), why)))
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
	if f, ok := c.failedUpgrades.Get(hr.Spec.Release); ok {
		status.FailedUpgrade = &f
	}
}

// restoreFailedUpgrades remembers the failed upgrades that the CRs'
// statuses record: a restarted locker, or a new leader, then neither
// tries them again for the same render nor opens a lock on a revision one
// left failed (see failedByUpgrade). It runs before any lock is decided.
func (c *Controller) restoreFailedUpgrades() {
	for _, obj := range c.crs.GetStore().List() {
		hr, ok := obj.(*v1alpha1.HelmRelease)
		if !ok || hr.Status.FailedUpgrade == nil || hr.Status.FailedUpgrade.Release != hr.Spec.Release {
			continue
		}
		if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
			continue
		}
		c.failedUpgrades.Set(hr.Spec.Release, *hr.Status.FailedUpgrade)
	}
}

// failedByUpgrade reports whether revision of rk, stored in the Secret
// with uid, is one Upgrade mode's upgrade left failed: the lock keeps
// holding the last verified revision while it is the latest. The locker
// caused it, so no retry or rollback of the user's is awaited; a Secret
// written by anyone else has another UID.
func (c *Controller) failedByUpgrade(rk v1alpha1.ReleaseKey, revision int, uid types.UID) bool {
	f, ok := c.failedUpgrades.Get(rk)
	return ok && f.Revision == revision && types.UID(f.SecretUID) == uid && uid != ""
}

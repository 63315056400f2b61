package twoway

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/throttle"
	"github.com/helm-locker/helm-locker/internal/upgrade"
)

// Upgrader upgrades a release to its chart rendered now, as the identity
// as impersonates, and returns the new revision. Upgrade mode's upgrades
// go through it; the unit tests count them with a fake.
type Upgrader interface {
	Upgrade(ctx context.Context, as *rest.Config, rel *render.Release) (int, error)
}

// helmUpgrader upgrades through the SDK of the Helm that wrote the
// revision, whose code the render that decided on it used.
type helmUpgrader struct{}

func (helmUpgrader) Upgrade(ctx context.Context, as *rest.Config, rel *render.Release) (int, error) {
	upgraded, err := upgrade.Upgrade(ctx, as, rel, upgrade.Options{})
	if err != nil {
		return 0, err
	}
	return upgraded.Version, nil
}

var _ Upgrader = helmUpgrader{}

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
func (r *Renders) decideUpgrade(key cache.ObjectName, target renderTarget, res *renderResult, upgraded string) upgradeDecision {
	if !res.stale {
		return upgradeDecision{step: noUpgrade}
	}
	if f, ok := r.failedUpgrades.Get(target.release); ok && f.RenderDigest == res.digest {
		return upgradeDecision{step: upgradeFailedBefore, failed: f}
	}
	if target.mode != v1alpha1.RerenderUpgrade || upgraded == res.digest || !r.stillUpgrades(key, target) {
		return upgradeDecision{step: noUpgrade}
	}
	if d := r.upgrades.Allow(target.release); !d.Allowed {
		return upgradeDecision{step: upgradeThrottled, held: d}
	}
	return upgradeDecision{step: upgradeNow}
}

// stillUpgrades reports whether key's HelmRelease, as the CR cache shows
// it now, still asks to upgrade target's release as target's writer. A
// render keeps the mode and writer it was queued with: an admin who
// switched the CR to Report or Off, suspended it, or named another writer
// while it rendered must not get its upgrade.
func (r *Renders) stillUpgrades(key cache.ObjectName, target renderTarget) bool {
	// A CR the cache could not convert asks for nothing.
	hr, ok := r.locks.HelmRelease(key)
	if !ok {
		return false
	}
	if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != r.cfg.ControllerName {
		return false
	}
	return !hr.Spec.Suspend && hr.Spec.Release == target.release &&
		r.Mode(hr) == v1alpha1.RerenderUpgrade && r.locks.ServiceAccount(hr) == target.writer
}

// reportUpgrade sets what d reports on res, the render key's lock
// reports next, with rs.mu held; for upgradeNow it notes the render as
// tried.
func (r *Renders) reportUpgrade(key cache.ObjectName, rs *renderState, target renderTarget, res *renderResult, d upgradeDecision) {
	switch d.step {
	case upgradeFailedBefore:
		// The render the upgrade failed with, again (as after Helm
		// rolled the failure back, or the locker restarted).
		res.status.Cause = d.failed.Cause
		res.cond = upgradeFailedCondition(d.failed.Cause, d.failed.Error)
	case upgradeThrottled:
		res.cond = upgradeThrottledCondition(res.cond.Message, d.held, r.cfg.UpgradeMaxPerHour)
		r.cfg.Metrics.ObserveRender(target.release.Namespace, target.release.Name, "UpgradeThrottled", 0)
		if !rs.throttledUntil.Equal(d.held.Next) {
			// Once per hold, not at every render while it lasts.
			rs.throttledUntil = d.held.Next
			r.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name},
				corev1.EventTypeWarning, v1alpha1.ReasonUpgradeThrottled, truncate(res.cond.Message, maxEventMessage))
		}
	case upgradeNow:
		rs.upgraded = res.digest
	}
}

// upgradeAsDecided makes the upgrade d decided on, and returns when to
// render key's release again: when an upgrade held back may be made, so
// that it is made without another change.
func (r *Renders) upgradeAsDecided(ctx context.Context, key cache.ObjectName, rs *renderState, target renderTarget, res *renderResult, rel *render.Release, d upgradeDecision) time.Duration {
	switch d.step {
	case upgradeThrottled:
		return max(d.held.Next.Sub(r.cfg.Clock.Now()), time.Millisecond)
	case upgradeNow:
		r.upgrade(ctx, key, rs, target, res, rel)
	}
	return 0
}

// upgrade upgrades the release with its chart rendered now, as the lock's
// write identity. A failure is recorded (status.failedUpgrade) in place of
// the last one, reported, and leaves the last deployed revision held; a
// success forgets the last failure. Until then the lock holds past the
// revision that failure left, if Helm writes nothing this time.
func (r *Renders) upgrade(ctx context.Context, key cache.ObjectName, rs *renderState, target renderTarget, res *renderResult, rel *render.Release) {
	logger := klog.FromContext(ctx)
	rk := target.release
	start := time.Now()
	cfg := rest.CopyConfig(r.cfg.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: impersonated(rk.Namespace, target.writer)}
	revision, err := r.cfg.Upgrader.Upgrade(ctx, cfg, rel)
	var failed v1alpha1.FailedUpgrade
	if err != nil {
		failed = v1alpha1.FailedUpgrade{Release: rk, RenderDigest: res.digest, Cause: truncate(res.status.Cause, maxFailedUpgradeCause),
			Error: truncate(err.Error(), v1alpha1.MaxFailedUpgradeError), Time: metav1.NewTime(r.cfg.Clock.Now())}
		// A revision Helm left failed (the upgrade's, or the
		// rollback's after it) would open the lock; the lock holds
		// the verified one instead.
		if latest, readErr := r.locks.LatestRevision(ctx, rk); readErr == nil && latest.Number > rel.Version && latest.Status == string(release.StatusFailed) {
			failed.Revision, failed.SecretUID = latest.Number, string(latest.UID)
		}
		// The lock's next sync writes it into the status, which
		// outlives this process (see RememberFailedUpgrade).
		r.failedUpgrades.Set(rk, failed)
	} else {
		r.failedUpgrades.Delete(rk)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.result != res {
		return
	}
	if err != nil {
		logger.Error(err, "Upgrade mode's upgrade failed; the last deployed revision stays held")
		r.cfg.Metrics.ObserveRender(rk.Namespace, rk.Name, "UpgradeFailed", time.Since(start))
		res.cond = upgradeFailedCondition(failed.Cause, failed.Error)
		r.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name},
			corev1.EventTypeWarning, v1alpha1.ReasonUpgradeFailed, truncate(res.cond.Message, maxEventMessage))
		return
	}
	logger.Info("Upgraded the release to the chart's new render", "newRevision", revision)
	r.cfg.Metrics.ObserveRender(rk.Namespace, rk.Name, "Upgraded", time.Since(start))
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

// FailedUpgrade is what is remembered of the last upgrade Helm failed
// for rk, for the status of the lock that holds it, which outlives this
// process.
func (r *Renders) FailedUpgrade(rk v1alpha1.ReleaseKey) (v1alpha1.FailedUpgrade, bool) {
	return r.failedUpgrades.Get(rk)
}

// RememberFailedUpgrade remembers a failed upgrade a CR's status records:
// a restarted locker, or a new leader, then neither tries it again for
// the same render nor opens a lock on a revision it left failed (see
// FailedByUpgrade). The controller tells it before any lock is decided.
func (r *Renders) RememberFailedUpgrade(f v1alpha1.FailedUpgrade) {
	r.failedUpgrades.Set(f.Release, f)
}

// FailedByUpgrade reports whether revision of rk, stored in the Secret
// with uid, is one Upgrade mode's upgrade left failed: the lock keeps
// holding the last verified revision while it is the latest. The locker
// caused it, so no retry or rollback of the user's is awaited; a Secret
// written by anyone else has another UID.
func (r *Renders) FailedByUpgrade(rk v1alpha1.ReleaseKey, revision int, uid types.UID) bool {
	f, ok := r.failedUpgrades.Get(rk)
	return ok && f.Revision == revision && types.UID(f.SecretUID) == uid && uid != ""
}

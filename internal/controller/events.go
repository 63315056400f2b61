package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// The reasons of the events on HelmRelease CRs.
const (
	EventLocked                = "Locked"
	EventUnlocked              = "Unlocked"
	EventDriftDetected         = "DriftDetected"
	EventDriftCorrected        = "DriftCorrected"
	EventDriftCorrectionFailed = "DriftCorrectionFailed"
	EventFighting              = "Fighting"
)

func crRef(hr *v1alpha1.HelmRelease) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
		Namespace: hr.Namespace, Name: hr.Name, UID: hr.UID,
	}
}

// reportDrifts turns a Sync's drifts and fights into metrics, events and
// the counts the status keeps. A drift already reported (engine.Drift.Held)
// is not reported again, so a fight costs a bounded number of events and
// status writes too.
func (c *Controller) reportDrifts(ctx context.Context, hr *v1alpha1.HelmRelease, st *releaseState, res engine.Result) {
	logger := klog.FromContext(ctx)
	ref := crRef(hr)
	rk := hr.Spec.Release
	now := time.Now()
	for _, d := range res.Drifts {
		var open *LockOpenError
		if d.Held || errors.As(d.Err, &open) {
			// Helm moving the release on is not drift.
			continue
		}
		c.cfg.Metrics.Drift(rk.Namespace, rk.Name, d.Kind, d.Corrected, d.Latency)
		st.driftsDetected++
		record := driftRecord(d, now)
		st.lastDrift = record
		desc := describeRecord(record)
		c.cfg.Recorder.Event(ref, corev1.EventTypeWarning, EventDriftDetected, desc)
		switch {
		case d.Err != nil:
			c.cfg.Recorder.Eventf(ref, corev1.EventTypeWarning, EventDriftCorrectionFailed, "%s: correcting it failed: %v", desc, d.Err)
			logger.V(2).Info("Drift correction failed", "drift", desc, "err", d.Err)
		case d.Corrected:
			st.corrected++
			c.cfg.Recorder.Eventf(ref, corev1.EventTypeNormal, EventDriftCorrected, "%s: reverted in %s", desc, d.Latency.Round(time.Microsecond))
			logger.V(4).Info("Drift corrected", "drift", desc, "latency", d.Latency)
		default:
			logger.V(4).Info("Drift detected", "drift", desc)
		}
	}
	fights := map[engine.ObjectRef]time.Time{}
	for _, f := range res.Fights {
		fights[f.Ref] = f.Until
		if until, ok := st.fights[f.Ref]; ok && until.Equal(f.Until) {
			continue
		}
		msg := fightMessage(f)
		c.cfg.Recorder.Event(ref, corev1.EventTypeWarning, EventFighting, limit(msg))
		logger.Info("Backing off a fight", "object", objectName(f.Kind, f.Ref), "until", f.Until)
	}
	st.fights = fights
}

// lockEvents records the lock engaging and opening. In Warn mode the lock
// holds nothing, so there is nothing to announce.
func (c *Controller) lockEvents(hr *v1alpha1.HelmRelease, before lock.Phase, st *releaseState, status v1alpha1.HelmReleaseStatus) {
	if hr.Spec.Mode == v1alpha1.ModeWarn {
		return
	}
	msg := ""
	for _, cond := range status.Conditions {
		if cond.Type == v1alpha1.ConditionLocked {
			msg = cond.Message
		}
	}
	switch after := st.lock.Phase; {
	case before != lock.Locked && after == lock.Locked:
		c.cfg.Recorder.Event(crRef(hr), corev1.EventTypeNormal, EventLocked, msg)
	case (before == lock.Locked || before == lock.Reconciling) && after == lock.Unlocked:
		c.cfg.Recorder.Event(crRef(hr), corev1.EventTypeNormal, EventUnlocked, msg)
	}
}

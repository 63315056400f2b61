package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// The reasons of the events on HelmRelease CRs. An event that tells what a
// condition tells has the condition's reason, the API's constant.
const (
	EventLocked                = v1alpha1.ReasonLocked
	EventUnlocked              = "Unlocked"
	EventDriftDetected         = "DriftDetected"
	EventDriftCorrected        = "DriftCorrected"
	EventDriftCorrectionFailed = "DriftCorrectionFailed"
	EventFighting              = v1alpha1.ReasonFighting
	EventNotAppliedByHelm      = v1alpha1.ReasonNotAppliedByHelm
	EventPruned                = "Pruned"
)

// noEvents is the recorder of a controller configured without one.
type noEvents struct{}

var _ record.EventRecorder = noEvents{}

func (noEvents) Event(runtime.Object, string, string, string)          {}
func (noEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (noEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}

func crRef(hr *v1alpha1.HelmRelease) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
		Namespace: hr.Namespace, Name: hr.Name, UID: hr.UID,
	}
}

// reportUnverified warns, once per finding, of each object of the revision
// the lock holds back because Helm was not seen to apply it.
func (c *Controller) reportUnverified(hr *v1alpha1.HelmRelease, st *releaseState, res engine.Result) {
	for _, u := range res.Unverified {
		msg := unverifiedMessage(st.rel.Version, u)
		if st.warned[msg] {
			continue
		}
		if st.warned == nil {
			st.warned = map[string]bool{}
		}
		st.warned[msg] = true
		c.cfg.Recorder.Event(crRef(hr), corev1.EventTypeWarning, EventNotAppliedByHelm, truncate(msg, maxEventMessage))
	}
}

// reportDrifts turns a Sync's drifts and fights into metrics, events and
// the counts the status keeps. A drift already reported (engine.Drift.Held)
// is not reported again, so a fight costs a bounded number of events and
// status writes too.
// The drift metrics are a release's; rk is nil for a lock of another
// kind, which counts only in its status.
func (c *Controller) reportDrifts(ctx context.Context, rk *v1alpha1.ReleaseKey, st *bookkeeping, res engine.Result) {
	logger := klog.FromContext(ctx)
	now := time.Now()
	for _, d := range res.Drifts {
		var open *LockOpenError
		var notHeld *NotHeldError
		if d.Held || errors.As(d.Err, &open) || errors.As(d.Err, &notHeld) {
			// Helm moving the release on is not drift, nor is an
			// object changing hands under a tenant's lock (see
			// tenantWriteGuard).
			continue
		}
		if rk != nil {
			manager := ""
			if len(d.Managers) > 0 {
				manager = d.Managers[0].Name
			}
			c.cfg.Metrics.Drift(rk.Namespace, rk.Name, d.Kind, manager, d.Corrected, d.Latency)
		}
		st.driftsDetected++
		record := driftRecord(d, now)
		st.lastDrift = record
		desc := describeRecord(record)
		// A corrected drift is reported as DriftCorrected alone:
		// events are writes, and a cold lock may correct thousands
		// of objects (see flushEvents).
		switch {
		case d.Err != nil:
			st.hold(corev1.EventTypeWarning, EventDriftDetected, desc)
			st.hold(corev1.EventTypeWarning, EventDriftCorrectionFailed, fmt.Sprintf("%s: correcting it failed: %v", desc, d.Err))
			logger.V(2).Info("Drift correction failed", "drift", desc, "err", d.Err)
			// The error names each refused field in a line; the API
			// server's message may add a dump of the refused value.
			var refused apierrors.APIStatus
			if errors.As(d.Err, &refused) {
				logger.V(4).Info("Drift correction refused", "drift", desc, "apiServerMessage", refused.Status().Message)
			}
		case d.Corrected:
			st.corrected++
			st.hold(corev1.EventTypeNormal, EventDriftCorrected, fmt.Sprintf("%s: reverted in %s", desc, d.Latency.Round(time.Microsecond)))
			logger.V(4).Info("Drift corrected", "drift", desc, "latency", d.Latency)
		default:
			st.hold(corev1.EventTypeWarning, EventDriftDetected, desc)
			logger.V(4).Info("Drift detected", "drift", desc)
		}
	}
	fights := map[engine.ObjectRef]time.Time{}
	for _, f := range res.Fights {
		fights[f.Ref] = f.Until
		if until, ok := st.fights[f.Ref]; ok && until.Equal(f.Until) {
			continue
		}
		if _, ongoing := st.fights[f.Ref]; !ongoing && rk != nil {
			c.cfg.Metrics.Fight(rk.Namespace, rk.Name, f.Kind)
		}
		msg := fightMessage(f)
		st.hold(corev1.EventTypeWarning, EventFighting, msg)
		logger.Info("Backing off a fight", "object", objectName(f.Kind, f.Ref), "until", f.Until)
	}
	st.fights = fights
}

// pendingEvent is an event waiting for the next flush (see
// releaseState.hold).
type pendingEvent struct{ eventType, reason, message string }

// maxPendingEvents bounds the messages of one reason a release holds
// between flushes; past it, drifts are counted but not described.
const maxPendingEvents = 25

// hold keeps an event until the release's next flush, which writes it
// with the status.
func (st *bookkeeping) hold(eventType, reason, message string) {
	k := pendingEvent{eventType: eventType, reason: reason}
	held := 0
	for _, e := range st.pending {
		if e.eventType == eventType && e.reason == reason {
			held++
		}
	}
	if held < maxPendingEvents {
		st.pending = append(st.pending, pendingEvent{eventType, reason, message})
		return
	}
	if st.unheld == nil {
		st.unheld = map[pendingEvent]int{}
	}
	st.unheld[k]++
}

// flushEvents records the events held back for the lock ref names: one
// event per reason, listing the drifts of that reason since the last flush,
// so that a cold lock that corrects thousands of objects writes one event
// per lock, not one per object.
func (c *Controller) flushEvents(ref *corev1.ObjectReference, st *bookkeeping) {
	var order []pendingEvent
	byReason := map[pendingEvent][]string{}
	for _, e := range st.pending {
		k := pendingEvent{eventType: e.eventType, reason: e.reason}
		if _, ok := byReason[k]; !ok {
			order = append(order, k)
		}
		byReason[k] = append(byReason[k], e.message)
	}
	for _, k := range order {
		c.cfg.Recorder.Event(ref, k.eventType, k.reason, joinMessages(byReason[k], st.unheld[k]))
	}
	st.pending, st.unheld = nil, nil
}

// maxEventMessage keeps an event's message within what `kubectl describe`
// shows and events.k8s.io accepts (1 KiB).
const maxEventMessage = 1024

// joinMessages joins the messages of one reason, as many as fit, and
// counts the rest, including unlisted ones that were never held.
func joinMessages(msgs []string, unlisted int) string {
	if len(msgs) == 1 && unlisted == 0 {
		return truncate(msgs[0], maxEventMessage)
	}
	var b strings.Builder
	total := len(msgs) + unlisted
	fmt.Fprintf(&b, "%d objects: ", total)
	for i, m := range msgs {
		more := fmt.Sprintf(" (and %d more)", total-i)
		sep := ""
		if i > 0 {
			sep = "; "
		}
		if b.Len()+len(sep)+len(m)+len(more) > maxEventMessage {
			b.WriteString(more)
			return b.String()
		}
		b.WriteString(sep + m)
	}
	if unlisted > 0 {
		fmt.Fprintf(&b, " (and %d more)", unlisted)
	}
	return b.String()
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// lockEvents records the lock engaging and opening: Locked once per
// revision, not again after each corrected drift, and Unlocked when it
// opens. In Warn mode the lock holds nothing, so there is nothing to
// announce.
// announced reports whether hr's status, as written before this sync,
// already says its revision is locked.
func announced(hr *v1alpha1.HelmRelease, revision int) bool {
	return hr.Status.Version == revision && meta.IsStatusConditionTrue(hr.Status.Conditions, v1alpha1.ConditionLocked)
}

func (c *Controller) lockEvents(hr *v1alpha1.HelmRelease, before lock.Lock, st *releaseState, status v1alpha1.HelmReleaseStatus) {
	if before.Warn || st.lock.Warn {
		return
	}
	msg := ""
	for _, cond := range status.Conditions {
		if cond.Type == v1alpha1.ConditionLocked {
			msg = cond.Message
		}
	}
	switch after := st.lock.Phase; {
	case after == lock.Locked && st.announced != st.lock.Revision:
		st.announced = st.lock.Revision
		if announced(hr, st.lock.Revision) {
			// A restarted locker, or a new leader, finds the lock
			// it holds again already reported: no news, and one
			// request less per release at start.
			return
		}
		c.cfg.Recorder.Event(crRef(hr), corev1.EventTypeNormal, EventLocked, msg)
	case after == lock.Unlocked:
		st.announced = 0
		if before.Phase == lock.Locked || before.Phase == lock.Reconciling {
			c.cfg.Recorder.Event(crRef(hr), corev1.EventTypeNormal, EventUnlocked, msg)
		}
	}
}

package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// AdmissionProbe says whether the API server reaches Prevent mode's
// webhook (see webhook.Probe).
type AdmissionProbe interface {
	// Answered returns when a probe was last answered, zero if none
	// was, and since when probes have been sent, zero if they are not.
	Answered() (last, since time.Time)
}

// AdmissionWindow is how long no probe may be answered before Prevent
// locks say admission is failing open. A probe goes every minute, and
// every 5 s after one goes unanswered (webhook.ProbeRetry), so a probe or
// two lost to a slow API server or a rollout is no alarm: the window is
// two minutes of retries after the first probe missed.
const AdmissionWindow = 3 * time.Minute

// admissionCheckEvery is how often the controller looks at the probe's
// answer, to sync the Prevent locks when their condition changes.
const admissionCheckEvery = 5 * time.Second

// admissionCondition is ConditionAdmissionAnswered at now, for a probe
// last answered at last (zero: never) that started at since. Its message
// changes only with its status, so that a lock's status is not written
// again at each probe.
func admissionCondition(last, since, now time.Time) metav1.Condition {
	switch {
	case !last.IsZero() && now.Sub(last) <= AdmissionWindow:
		return condition(v1alpha1.ConditionAdmissionAnswered, true, v1alpha1.ReasonAdmissionAnswered,
			"the API server reaches the webhook: edits that would drift what this lock holds are denied")
	case last.IsZero() && now.Sub(since) <= AdmissionWindow:
		return metav1.Condition{Type: v1alpha1.ConditionAdmissionAnswered, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonAdmissionProbing,
			Message: "waiting for the first probe's answer through the API server"}
	}
	when := "since the probe started at " + since.UTC().Format(time.RFC3339)
	if !last.IsZero() {
		when = "since " + last.UTC().Format(time.RFC3339)
	}
	return condition(v1alpha1.ConditionAdmissionAnswered, false, v1alpha1.ReasonAdmissionNotAnswered,
		fmt.Sprintf("the API server has not reached the webhook %s: edits that would drift what this lock holds are let through (failurePolicy Ignore) and only reverted after the fact; check the webhook's Service, NetworkPolicy and caBundle", when))
}

// setAdmission sets ConditionAdmissionAnswered on a lock in Prevent mode,
// and removes it from any other lock, or when the webhook is off.
func (c *Controller) setAdmission(s *v1alpha1.LockStatus, mode v1alpha1.Mode, generation int64) {
	if c.cfg.Admission == nil || mode != v1alpha1.ModePrevent {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionAdmissionAnswered)
		return
	}
	last, since := c.cfg.Admission.Answered()
	if since.IsZero() {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionAdmissionAnswered)
		return
	}
	setConditions(s, generation, admissionCondition(last, since, time.Now()))
}

// watchAdmission syncs every lock again whenever the probe's condition
// changes, until ctx is done: nothing else would write a lock's status
// when only the API server's reach changed.
func (c *Controller) watchAdmission(ctx context.Context) {
	var reason string
	ticker := time.NewTicker(admissionCheckEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		last, since := c.cfg.Admission.Answered()
		if since.IsZero() {
			continue
		}
		if now := admissionCondition(last, since, time.Now()).Reason; now != reason {
			reason = now
			c.enqueueAll()
		}
	}
}

package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestAdmissionCondition: True while a probe was answered within the
// window, Unknown before the first answer while the window has not passed,
// False after; on an idle cluster the probe, not the traffic, decides. Its
// message changes with its status only.
func TestAdmissionCondition(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		last, now   time.Time
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{name: "answered a minute ago", last: start.Add(10 * time.Minute), now: start.Add(11 * time.Minute),
			wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonAdmissionAnswered},
		{name: "answered just within the window", last: start, now: start.Add(AdmissionWindow),
			wantStatus: metav1.ConditionTrue, wantReason: v1alpha1.ReasonAdmissionAnswered},
		{name: "no answer yet, just started", now: start.Add(time.Minute),
			wantStatus: metav1.ConditionUnknown, wantReason: v1alpha1.ReasonAdmissionProbing},
		{name: "never answered", now: start.Add(AdmissionWindow + time.Second),
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonAdmissionNotAnswered, wantMessage: "since the probe started at 2026-01-01T00:00:00Z"},
		{name: "answered, then no more", last: start.Add(time.Hour), now: start.Add(time.Hour + AdmissionWindow + time.Second),
			wantStatus: metav1.ConditionFalse, wantReason: v1alpha1.ReasonAdmissionNotAnswered, wantMessage: "since 2026-01-01T01:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := admissionCondition(tt.last, start, tt.now)
			if c.Type != v1alpha1.ConditionAdmissionAnswered || c.Status != tt.wantStatus || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMessage) {
				t.Errorf("condition %+v, want %s/%s saying %q", c, tt.wantStatus, tt.wantReason, tt.wantMessage)
			}
			if later := admissionCondition(tt.last, start, tt.now.Add(time.Second)); later.Status == c.Status && later.Message != c.Message {
				t.Errorf("the message changed without the status: %q, then %q", c.Message, later.Message)
			}
		})
	}
}

type fixedProbe struct{ last, since time.Time }

func (f fixedProbe) Answered() (time.Time, time.Time) { return f.last, f.since }

// TestSetAdmission: only a lock in Prevent mode, with the webhook on and
// probed, carries the condition; any other loses it.
func TestSetAdmission(t *testing.T) {
	now := time.Now()
	probed := fixedProbe{last: now, since: now.Add(-time.Hour)}
	tests := []struct {
		name  string
		probe AdmissionProbe
		mode  v1alpha1.Mode
		want  bool
	}{
		{name: "Prevent", probe: probed, mode: v1alpha1.ModePrevent, want: true},
		{name: "Enforce", probe: probed, mode: v1alpha1.ModeEnforce},
		{name: "default mode", probe: probed},
		{name: "webhook off", mode: v1alpha1.ModePrevent},
		{name: "not probing (a standby)", probe: fixedProbe{}, mode: v1alpha1.ModePrevent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Controller{cfg: Config{Admission: tt.probe}}
			s := &v1alpha1.LockStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionAdmissionAnswered, Status: metav1.ConditionFalse, Reason: "Old"}}}
			c.setAdmission(s, tt.mode, 3)
			got := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionAdmissionAnswered)
			if (got != nil) != tt.want || (got != nil && (got.Status != metav1.ConditionTrue || got.ObservedGeneration != 3)) {
				t.Errorf("condition %+v, want present and True: %v", got, tt.want)
			}
		})
	}
}

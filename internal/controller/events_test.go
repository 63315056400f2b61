package controller

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/lock"
)

func TestJoinMessages(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name      string
		msgs      []string
		unlisted  int
		want      string // the whole message, or its start when wantLen is set
		wantLen   int
		wantAfter string // the end of the message
	}{
		{name: "one", msgs: []string{"ConfigMap a/b at /data/key"}, want: "ConfigMap a/b at /data/key"},
		{name: "several", msgs: []string{"ConfigMap a/b at /data/key", "ConfigMap a/c was deleted"}, want: "2 objects: ConfigMap a/b at /data/key; ConfigMap a/c was deleted"},
		{name: "too many to list", msgs: []string{long, long, long}, want: "3 objects: " + long, wantAfter: " (and 2 more)"},
		{name: "one too long", msgs: []string{strings.Repeat("y", 2000)}, wantLen: maxEventMessage, want: "yyy", wantAfter: "…"},
		{name: "cut on a rune boundary", msgs: []string{strings.Repeat("é", 600)}, wantLen: maxEventMessage - 1, want: "ééé", wantAfter: "é…"},
		{name: "unlisted are counted", msgs: []string{"ConfigMap a/b at /data/key"}, unlisted: 4, want: "5 objects: ConfigMap a/b at /data/key (and 4 more)"},
		{name: "unlisted and too many to list", msgs: []string{long, long}, unlisted: 3, want: "5 objects: " + long, wantAfter: " (and 4 more)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := joinMessages(tt.msgs, tt.unlisted)
			switch {
			case tt.wantAfter == "" && got != tt.want:
				t.Errorf("joinMessages = %q, want %q", got, tt.want)
			case tt.wantAfter != "" && (!strings.HasPrefix(got, tt.want) || !strings.HasSuffix(got, tt.wantAfter)):
				t.Errorf("joinMessages = %q, want %q … %q", got, tt.want[:min(40, len(tt.want))], tt.wantAfter)
			}
			if len(got) > maxEventMessage {
				t.Errorf("message of %d bytes, want at most %d", len(got), maxEventMessage)
			}
			if tt.wantLen != 0 && len(got) != tt.wantLen {
				t.Errorf("message of %d bytes, want %d", len(got), tt.wantLen)
			}
		})
	}
}

// TestHoldCountsPastTheBound holds more drifts than it keeps messages for:
// the flushed event still counts every one of them, and an event of
// another reason is held whole.
func TestHoldCountsPastTheBound(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Recorder: rec}}
	st := &releaseState{}
	for i := range maxPendingEvents + 5 {
		st.hold(corev1.EventTypeNormal, EventDriftCorrected, fmt.Sprintf("ConfigMap ns/cm-%d", i))
	}
	st.hold(corev1.EventTypeWarning, EventFighting, "fight")
	c.flushEvents(crRef(&v1alpha1.HelmRelease{}), &st.bookkeeping)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		fmt.Sprintf("Normal DriftCorrected %d objects: ", maxPendingEvents+5),
		"Warning Fighting fight",
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if !strings.HasSuffix(got[0], "(and 5 more)") {
		t.Errorf("event %q does not count the 5 drifts past the bound", got[0])
	}
	if st.pending != nil || st.unheld != nil {
		t.Errorf("flush left pending %v, unheld %v", st.pending, st.unheld)
	}
}

// TestLockEventsOncePerRevision: a drift corrected within a revision takes
// the lock through Reconciling and back, which is not news; a new revision
// and the lock opening are. A revision the CR already says is locked, as a
// restarted locker finds it, is not news either.
func TestLockEventsOncePerRevision(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Recorder: rec}}
	hr := &v1alpha1.HelmRelease{}
	st := &releaseState{}
	steps := []struct {
		to   lock.Lock
		want string
	}{
		{lock.Lock{Phase: lock.Reconciling, Revision: 1}, ""},
		{lock.Lock{Phase: lock.Locked, Revision: 1}, "Normal Locked"},
		{lock.Lock{Phase: lock.Reconciling, Revision: 1}, ""},
		{lock.Lock{Phase: lock.Locked, Revision: 1}, ""},
		{lock.Lock{Phase: lock.Reconciling, Revision: 2}, ""},
		{lock.Lock{Phase: lock.Locked, Revision: 2}, "Normal Locked"},
		{lock.Lock{Phase: lock.Unlocked}, "Normal Unlocked"},
		{lock.Lock{Phase: lock.Reconciling, Revision: 2}, ""},
		{lock.Lock{Phase: lock.Locked, Revision: 2}, "Normal Locked"},
		// A lock that only watches holds nothing to announce, from
		// its engaging to its opening.
		{lock.Lock{Phase: lock.Reconciling, Revision: 3, Warn: true}, ""},
		{lock.Lock{Phase: lock.Watching, Revision: 3, Warn: true}, ""},
		{lock.Lock{Phase: lock.Reconciling, Revision: 3, Warn: true}, ""},
		{lock.Lock{Phase: lock.Unlocked}, ""},
		// A restarted locker finds revision 4 already reported locked
		// in the CR's status: no news.
		{lock.Lock{Phase: lock.Reconciling, Revision: 4}, ""},
		{lock.Lock{Phase: lock.Locked, Revision: 4}, ""},
	}
	for i, step := range steps {
		if step.to.Revision == 4 {
			hr.Status = v1alpha1.HelmReleaseStatus{Version: 4}
			hr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue}}
		}
		before := st.lock
		st.lock = step.to
		c.lockEvents(hr, before, st, v1alpha1.HelmReleaseStatus{})
		got := ""
		select {
		case got = <-rec.Events:
		default:
		}
		if strings.TrimSpace(got) != step.want {
			t.Errorf("step %d (%+v to %+v): event %q, want %q", i, before, step.to, got, step.want)
		}
	}
}

func TestAwaitingOwnWrites(t *testing.T) {
	corrected := engine.Drift{Corrected: true}
	tests := []struct {
		name string
		res  engine.Result
		want bool
	}{
		{name: "in line", res: engine.Result{Objects: 2, Locked: 2, InLine: true}},
		{name: "one corrected, the rest in line", res: engine.Result{Objects: 2, Locked: 1, Drifts: []engine.Drift{corrected}}, want: true},
		{name: "one corrected, one not yet checked", res: engine.Result{Objects: 3, Locked: 1, Drifts: []engine.Drift{corrected}}},
		{name: "correction failed", res: engine.Result{Objects: 2, Locked: 1, Drifted: 1, Drifts: []engine.Drift{{Err: errors.New("denied")}}}},
		{name: "fighting", res: engine.Result{Objects: 2, Locked: 1, Drifts: []engine.Drift{corrected}, Fights: []engine.Fight{{}}}},
		{name: "types unresolved", res: engine.Result{Objects: 3, Locked: 1, Drifts: []engine.Drift{corrected}, Unresolved: []error{errors.New("no CRD")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := awaitingOwnWrites(tt.res); got != tt.want {
				t.Errorf("awaitingOwnWrites(%+v) = %t, want %t", tt.res, got, tt.want)
			}
		})
	}
}

// TestDriftAndFightMetrics: a drift counts under the manager that made
// it (one the metrics do not know, as "other"), and a fight counts once when it begins, not at every Sync that
// reports it ongoing.
func TestDriftAndFightMetrics(t *testing.T) {
	m := metrics.New(nil)
	c := &Controller{cfg: Config{Metrics: m, Recorder: record.NewFakeRecorder(100)}}
	rk := &v1alpha1.ReleaseKey{Namespace: "apps", Name: "web"}
	ref := engine.ObjectRef{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "apps", Name: "web-config"}
	until := time.Now().Add(10 * time.Second)
	res := engine.Result{
		Drifts: []engine.Drift{{Ref: ref, Kind: "ConfigMap", Managers: []engine.Manager{{Name: "fighter"}}, Corrected: true}},
		Fights: []engine.Fight{{Ref: ref, Kind: "ConfigMap", Until: until}},
	}
	st := &bookkeeping{}
	c.reportDrifts(t.Context(), rk, st, res)
	c.reportDrifts(t.Context(), rk, st, engine.Result{Fights: res.Fights})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="other",namespace="apps",release="web"} 1`,
		`helm_locker_fights_total{kind="ConfigMap",namespace="apps",release="web"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestNextFlush: bookkeeping waits for drift to stop for bookkeepingDelay,
// and never longer than maxBookkeepingDelay after it began.
func TestNextFlush(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		now, want time.Duration // after t0
	}{
		{name: "the first drift", now: 0, want: bookkeepingDelay},
		{name: "more drift, soon after", now: 3 * time.Second, want: 3*time.Second + bookkeepingDelay},
		{name: "drift that goes on", now: 9 * time.Second, want: maxBookkeepingDelay},
		{name: "past the bound", now: 12 * time.Second, want: maxBookkeepingDelay},
	}
	for _, tt := range tests {
		if got := nextFlush(t0, t0.Add(tt.now)); !got.Equal(t0.Add(tt.want)) {
			t.Errorf("%s: nextFlush = +%s, want +%s", tt.name, got.Sub(t0), tt.want)
		}
	}
}

// TestBookkeepingTakesTurns: when many releases' bookkeeping falls due at
// once, as a mass drift makes it, the budget they share writes
// bookkeepingBurst of them at once and the rest in turns, first due first;
// a release that has its turn is not pushed back by more drift, and one
// whose status changes beyond bookkeeping writes at once.
func TestBookkeepingTakesTurns(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	budget := rate.NewLimiter(bookkeepingRate, bookkeepingBurst)
	step := time.Second / bookkeepingRate
	releases := make([]*bookkeeping, bookkeepingBurst+5)
	for i := range releases {
		releases[i] = &bookkeeping{driftsDetected: 1}
		if d := releases[i].holdFor(t0, true, budget); d != bookkeepingDelay {
			t.Fatalf("release %d, first drift: holds %s, want %s", i, d, bookkeepingDelay)
		}
	}
	due := t0.Add(bookkeepingDelay)
	for i, b := range releases {
		want := time.Duration(0)
		if i >= bookkeepingBurst {
			want = time.Duration(i-bookkeepingBurst+1) * step
		}
		if d := b.holdFor(due, true, budget); d != want {
			t.Errorf("release %d, due: holds %s, want %s", i, d, want)
		}
	}

	waiting := releases[bookkeepingBurst+2]
	waiting.driftsDetected++
	if d, want := waiting.holdFor(due.Add(step), true, budget), 2*step; d != want {
		t.Errorf("more drift while it has its turn: holds %s, want %s", d, want)
	}

	changed := releases[bookkeepingBurst]
	if d := changed.holdFor(due, false, budget); d != 0 {
		t.Errorf("a change beyond bookkeeping: holds %s, want 0", d)
	}
}

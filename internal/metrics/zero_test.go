package metrics

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSeriesStartAtZero: a labelled counter appears only at its first
// increment, which rate() and increase() then miss. So each series whose
// labels are known is created at 0: each reason of events_dropped_total and
// each answer of admission_reviews_total at start; a HelmRelease's reconcile errors, locked and stuck gauges when it
// is first observed; a held release's drifts (as the "unknown" manager's),
// corrections, fights and denials for each kind it holds. Forgetting the lock deletes them.
func TestSeriesStartAtZero(t *testing.T) {
	m := New(nil)
	body := scrape(t, m)
	for _, reason := range EventDropReasons {
		want := `helm_locker_events_dropped_total{reason="` + reason + `"} 0`
		if !strings.Contains(body, want) {
			t.Errorf("at start, metrics lack %s", want)
		}
	}
	for _, want := range []string{`helm_locker_admission_reviews_total{allowed="false"} 0`, `helm_locker_admission_reviews_total{allowed="true"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("at start, metrics lack %s", want)
		}
	}

	m.ObserveRelease("registration/web", false, 0)
	m.HoldRelease("apps", "web", []string{"ConfigMap", "Service"})
	m.ObserveRelease("registration/shop", true, 2)
	m.ObserveHelmOperation("registration/shop", true)
	want := []string{
		`helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="web"} 0`,
		`helm_locker_admission_denied_total{kind="Service",namespace="apps",release="web"} 0`,
		`helm_locker_drift_corrected_total{kind="ConfigMap",namespace="apps",release="web"} 0`,
		`helm_locker_drift_corrected_total{kind="Service",namespace="apps",release="web"} 0`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="unknown",namespace="apps",release="web"} 0`,
		`helm_locker_drift_detected_total{kind="Service",manager="unknown",namespace="apps",release="web"} 0`,
		`helm_locker_fights_total{kind="ConfigMap",namespace="apps",release="web"} 0`,
		`helm_locker_fights_total{kind="Service",namespace="apps",release="web"} 0`,
		`helm_locker_helm_operation_stuck{name="shop",namespace="registration"} 1`,
		`helm_locker_helm_operation_stuck{name="web",namespace="registration"} 0`,
		`helm_locker_reconcile_errors_total{name="shop",namespace="registration"} 0`,
		`helm_locker_reconcile_errors_total{name="web",namespace="registration"} 0`,
		`helm_locker_release_locked{name="shop",namespace="registration"} 1`,
		`helm_locker_release_locked{name="web",namespace="registration"} 0`,
	}
	if diff := cmp.Diff(want, releaseSeries(scrape(t, m))); diff != "" {
		t.Errorf("series of the two HelmReleases (-want +got):\n%s", diff)
	}

	m.ObserveRelease("registration/web", true, 2)
	m.ReconcileError("registration", "web")
	m.Fight("apps", "web", "ConfigMap")
	body = scrape(t, m)
	for _, want := range []string{
		`helm_locker_release_locked{name="web",namespace="registration"} 1`,
		`helm_locker_reconcile_errors_total{name="web",namespace="registration"} 1`,
		`helm_locker_fights_total{kind="ConfigMap",namespace="apps",release="web"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	m.ForgetRelease("registration/web")
	m.ForgetLock("apps", "web")
	m.ForgetRelease("registration/shop")
	if got := releaseSeries(scrape(t, m)); len(got) != 0 {
		t.Errorf("the locks are forgotten; their series remain:\n%s", strings.Join(got, "\n"))
	}

	var none *Metrics
	none.HoldRelease("apps", "web", []string{"ConfigMap"})
	none.ObserveHelmOperation("registration/web", true)
}

// releaseSeries are the lines of a scrape that name a release or a
// HelmRelease.
func releaseSeries(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "helm_locker_") && (strings.Contains(line, `release="`) || strings.Contains(line, `name="`)) {
			out = append(out, line)
		}
	}
	return out
}

package controller

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"

	"github.com/helm-locker/helm-locker/internal/metrics"
)

// TestHeldReleaseSeriesStartAtZero: the first sync of a HelmRelease that
// holds its release creates the series the dashboard and the chart's
// alerts query for it at 0, so that rate() and increase() see the first
// increment: its reconcile errors and stuck gauge, its locked gauge, and
// the corrections, fights and denials of each kind its release holds.
func TestHeldReleaseSeriesStartAtZero(t *testing.T) {
	m := metrics.New(nil)
	c, _ := newTestControllerWith(t, func(cfg *Config) { cfg.Metrics = m }, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.Recorder = record.NewFakeRecorder(100)
	if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`helm_locker_reconcile_errors_total{name="hr",namespace="cattle-helm-system"} 0`,
		`helm_locker_helm_operation_stuck{name="hr",namespace="cattle-helm-system"} 0`,
		`helm_locker_release_locked{name="hr",namespace="cattle-helm-system"} `,
		// The fixture's ConfigMap is not as declared: the sync corrects it.
		`helm_locker_drift_corrected_total{kind="ConfigMap",namespace="apps",release="rel"} `,
		`helm_locker_fights_total{kind="ConfigMap",namespace="apps",release="rel"} 0`,
		`helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="rel"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("after the first sync, /metrics lacks %s", want)
		}
	}
}

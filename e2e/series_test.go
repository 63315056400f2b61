package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/internal/metrics"
)

// TestSeriesAtZero: a labelled counter appears in /metrics only at its
// first increment, so rate() and increase() miss that first one, an
// alert on it never fires, and a dashboard panel shows "No data". Once a
// healthy release's HelmRelease is Deployed, every series the dashboard
// (deploy/dashboards) and the chart's alerts query for it is there, at 0
// (the locked gauge at 1): its reconcile errors, locked and stuck gauges
// (labelled with the HelmRelease's namespace and name), and the
// corrections, fights and denials of each kind the release holds
// (labelled with the release's). So is each reason of
// events_dropped_total. drift_detected_total is not among them: its
// manager label is known only at a drift.
func TestSeriesAtZero(t *testing.T) {
	t.Parallel()
	registration, ns := env.Namespace(t), env.Namespace(t)
	const controller, release = "series-at-zero", "zero"
	locker, err := env.StartLocker(controller, "--namespace", registration, "--controller-name", controller, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })
	metricsAddr := framework.ServedAddress(t, locker, "metrics")

	env.Helm(t, framework.Helm3, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterIn(t, registration, ns, release)
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	want := map[string]float64{}
	ofCR := fmt.Sprintf(`{name=%q,namespace=%q}`, cr, registration)
	want["helm_locker_release_locked"+ofCR] = 1
	want["helm_locker_helm_operation_stuck"+ofCR] = 0
	want["helm_locker_reconcile_errors_total"+ofCR] = 0
	ofRelease := fmt.Sprintf(`{kind="ConfigMap",namespace=%q,release=%q}`, ns, release)
	for _, name := range []string{"drift_corrected_total", "fights_total", "admission_denied_total"} {
		want["helm_locker_"+name+ofRelease] = 0
	}
	for _, reason := range metrics.EventDropReasons {
		want[fmt.Sprintf(`helm_locker_events_dropped_total{reason=%q}`, reason)] = 0
	}

	scraped := metricsOf(t, metricsAddr)
	got := map[string]float64{}
	var missing []string
	for series := range want {
		if v, ok := scraped[series]; ok {
			got[series] = v
		} else {
			missing = append(missing, series)
		}
	}
	sort.Strings(missing)
	for _, series := range missing {
		t.Errorf("/metrics lacks %s", series)
	}
	if diff := cmp.Diff(want, got); len(missing) == 0 && diff != "" {
		t.Errorf("series of HelmRelease %s/%s and its release (-want +got):\n%s", registration, cr, diff)
	}
}

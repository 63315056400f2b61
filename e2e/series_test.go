package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/promql"
)

// TestSeriesAtZero: a labelled counter appears in /metrics only at its
// first increment, so rate() and increase() miss that first one, an
// alert on it never fires, and a dashboard panel shows "No data". Once a
// healthy release's HelmRelease is Deployed on a fresh start, every series
// the shipped dashboard (deploy/dashboards) and the chart's alerts query,
// every query of every panel, variable and alert, is in /metrics: its
// reconcile errors, locked and stuck gauges (labelled with the
// HelmRelease's namespace and name) and its render's staleness; the
// drifts, corrections, fights and denials of each kind the release holds
// (labelled with the release's; drifts as the "unknown" manager's, the
// only one known before a drift); each reason of events_dropped_total and
// each answer of admission_reviews_total, at 0.
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
	// Rendered, so that its render's staleness has a series too.
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
	cr := env.RegisterWith(t, registration, ns, release, map[string]any{"serviceAccountName": "writer", "rerender": string(v1alpha1.RerenderReport)})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	queries := shippedQueries(t)
	env.Eventually(t, 30*time.Second, func() error {
		scraped := promql.Series{}
		for series := range metricsOf(t, metricsAddr) {
			name, labels, _ := strings.Cut(series, "{")
			if scraped[name] == nil {
				scraped[name] = map[string]bool{}
			}
			for _, l := range labelName.FindAllStringSubmatch(labels, -1) {
				scraped[name][l[1]] = true
			}
		}
		var problems []string
		for _, q := range queries {
			found := promql.Check(q.Expr, scraped)
			if q.Variable {
				found = promql.CheckVariable(q.Expr, scraped)
			}
			for _, p := range found {
				problems = append(problems, q.Where+": "+p)
			}
		}
		if len(problems) > 0 {
			rendered := findCondition(env.HelmReleaseIn(t, registration, cr), v1alpha1.ConditionRendered)
			return fmt.Errorf("with HelmRelease %s/%s Deployed on a fresh start (Rendered %+v), /metrics lacks what the shipped dashboard and alerts query:\n%s", registration, cr, rendered, strings.Join(problems, "\n"))
		}
		return nil
	})

	want := map[string]float64{}
	ofCR := fmt.Sprintf(`{name=%q,namespace=%q}`, cr, registration)
	want["helm_locker_release_locked"+ofCR] = 1
	want["helm_locker_helm_operation_stuck"+ofCR] = 0
	want["helm_locker_reconcile_errors_total"+ofCR] = 0
	ofRelease := fmt.Sprintf(`{kind="ConfigMap",namespace=%q,release=%q}`, ns, release)
	for _, name := range []string{"drift_corrected_total", "fights_total", "admission_denied_total"} {
		want["helm_locker_"+name+ofRelease] = 0
	}
	want[fmt.Sprintf(`helm_locker_drift_detected_total{kind="ConfigMap",manager="unknown",namespace=%q,release=%q}`, ns, release)] = 0
	want[`helm_locker_admission_reviews_total{allowed="false"}`] = 0
	want[`helm_locker_admission_reviews_total{allowed="true"}`] = 0
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

var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// shippedQueries are every query of the shipped dashboard and of every
// alert the chart can render (the webhook's included), the rule rendered
// by the real helm CLI.
func shippedQueries(t *testing.T) []promql.Query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(operatorChart(t)), "..", "dashboards", "helm-locker.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := promql.ReadDashboard(data)
	if err != nil {
		t.Fatal(err)
	}
	rule := env.Helm(t, framework.Helm4, "template", "hl", operatorChart(t), "--set", "metrics.prometheusRule.enabled=true,webhook.enabled=true",
		"--show-only", "templates/prometheusrule.yaml")
	alerts, err := promql.ReadRules([]byte(rule))
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) == 0 || len(d.Queries()) == 0 {
		t.Fatalf("the chart renders %d alerts and the dashboard has %d queries", len(alerts), len(d.Queries()))
	}
	return append(d.Queries(), alerts...)
}

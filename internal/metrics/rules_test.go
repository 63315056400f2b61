package metrics

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/helm-locker/helm-locker/internal/promql"
)

// chartDir is the operator's chart, whose PrometheusRule holds the alerts.
var chartDir = filepath.Join("..", "..", "deploy", "chart", "helm-locker")

// TestAlertRulesQueryExportedMetrics holds the chart's alerts to the
// metrics the locker exports, as TestDashboardQueriesExportedMetrics
// holds the dashboard: every series an alert's expression names is one
// the registry describes, with the labels it selects or groups on.
// cmd/helm-locker's TestChartAlertRules holds them to promtool.
func TestAlertRulesQueryExportedMetrics(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "hl", Namespace: "registration", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := promql.ReadRules([]byte(out["helm-locker/templates/prometheusrule.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	series := exportedSeries(t)
	for _, r := range rules {
		for _, problem := range promql.Check(r.Expr, series) {
			t.Errorf("%s: %s", r.Where, problem)
		}
	}
	if len(rules) == 0 {
		t.Fatal("the chart's PrometheusRule has no rules")
	}
}

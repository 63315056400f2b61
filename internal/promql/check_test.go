package promql

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheck(t *testing.T) {
	series := Series{
		"helm_locker_drift_detected_total":          {"namespace": true, "release": true, "kind": true, "manager": true},
		"helm_locker_revert_latency_seconds_bucket": {"le": true},
		"helm_locker_admission_reviews_total":       {"allowed": true},
	}
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"rate by a label it has", `sum by (manager) (rate(helm_locker_drift_detected_total{job=~"$job"}[5m]))`, nil},
		{"quantile of a histogram", `histogram_quantile(0.99, sum by (le) (rate(helm_locker_revert_latency_seconds_bucket[$__rate_interval])))`, nil},
		{"a comparison with keywords and numbers", `sum(helm_locker_admission_reviews_total{allowed="false"}) > 1e3 and on() vector(1) > bool 0`, nil},
		{"a series that is not there", `rate(helm_locker_admission_reviews_shed_total[5m])`, []string{"no series helm_locker_admission_reviews_shed_total"}},
		{"a label the series lacks", `helm_locker_admission_reviews_total{reason="x"}`, []string{"helm_locker_admission_reviews_total has no label reason"}},
		{"grouping by a label none has", `sum by (shard) (helm_locker_admission_reviews_total)`, []string{"groups by shard, a label none of helm_locker_admission_reviews_total has"}},
		{"a selector with no name", `{__name__=~"helm_locker_.+"}`, []string{`a selector without a metric name: {__name__=~""}`}},
		{"empty", " ", []string{"empty query"}},
		{"a string holding braces", `label_replace(helm_locker_admission_reviews_total, "x", "{y}", "allowed", "(.*)")`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Check(tc.expr, series)); diff != "" {
				t.Errorf("Check(%s) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestCheckVariable(t *testing.T) {
	series := Series{"helm_locker_release_locked": {"namespace": true, "name": true}}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`label_values(helm_locker_release_locked, namespace)`, nil},
		{`label_values(helm_locker_release_locked{job=~"$job"}, job)`, nil},
		{`label_values(helm_locker_release_locked, release)`, []string{"helm_locker_release_locked has no label release"}},
		{`label_values(helm_locker_missing, namespace)`, []string{"no series helm_locker_missing"}},
	} {
		if diff := cmp.Diff(tc.want, CheckVariable(tc.query, series)); diff != "" {
			t.Errorf("CheckVariable(%s) (-want +got):\n%s", tc.query, diff)
		}
	}
}

func TestQueries(t *testing.T) {
	d, err := ReadDashboard([]byte(`{
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "job", "type": "query", "query": {"query": "label_values(up, job)"}},
	    {"name": "ns", "type": "query", "query": "label_values(x, namespace)"}
	  ]},
	  "panels": [
	    {"title": "top", "targets": [{"expr": "a"}, {"expr": "b"}]},
	    {"title": "row", "type": "row", "panels": [{"title": "inner", "targets": [{"expr": "c"}]}]}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{Where: "variable job", Expr: "label_values(up, job)", Variable: true},
		{Where: "variable ns", Expr: "label_values(x, namespace)", Variable: true},
		{Where: `panel "top"`, Expr: "a"},
		{Where: `panel "top"`, Expr: "b"},
		{Where: `panel "inner"`, Expr: "c"},
	}
	if diff := cmp.Diff(want, d.Queries()); diff != "" {
		t.Errorf("Queries (-want +got):\n%s", diff)
	}

	rules, err := ReadRules([]byte("kind: PrometheusRule\nspec:\n  groups:\n  - rules:\n    - alert: A\n      expr: x > 0\n    - record: r\n      expr: sum(x)\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Query{{Where: "alert A", Expr: "x > 0"}, {Where: "record r", Expr: "sum(x)"}}, rules); diff != "" {
		t.Errorf("ReadRules (-want +got):\n%s", diff)
	}
	if _, err := ReadRules([]byte("kind: ConfigMap\n")); err == nil {
		t.Error("ReadRules of a ConfigMap: want an error")
	}
}

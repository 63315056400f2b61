package metrics

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/internal/promql"
)

// dashboardFile is the Grafana dashboard shipped for the locker.
const dashboardFile = "../../deploy/dashboards/helm-locker.json"

// TestDashboardQueriesExportedMetrics holds the dashboard to the metrics
// the locker exports: every series a panel's or a variable's query names
// is one the registry describes, and every label it selects or groups on
// is one of that series' labels. A metric renamed here, or misspelled
// there, fails it; so does a panel with no title or no query.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := promql.ReadDashboard(data)
	if err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	series := exportedSeries(t)

	hasDatasource := false
	for _, v := range d.Templating.List {
		hasDatasource = hasDatasource || v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"`
	}
	if !hasDatasource {
		t.Errorf("the dashboard has no ${datasource} variable of type prometheus")
	}

	ids := map[int]bool{}
	var check func([]promql.Panel)
	check = func(panels []promql.Panel) {
		for _, p := range panels {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d is used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			if p.Type == "row" {
				check(p.Panels)
				continue
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %q, want ${datasource}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no target", p.Title)
			}
		}
	}
	check(d.Panels)
	for _, q := range d.Queries() {
		problems := promql.Check(q.Expr, series)
		if q.Variable {
			problems = promql.CheckVariable(q.Expr, series)
		}
		for _, problem := range problems {
			t.Errorf("%s: %s", q.Where, problem)
		}
	}
}

// exportedSeries returns the series the locker's registry exports, each
// with its labels: a counter or gauge under its name, a histogram under
// its _bucket (with le), _sum and _count. Every vector gets a series
// first, since Gather shows a family only once it has one; every
// collector the registry describes must then be among them.
func exportedSeries(t *testing.T) promql.Series {
	t.Helper()
	m := New(func() []schema.GroupVersionResource {
		return []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}}
	})
	m.ObserveRelease("cattle-helm-system/web", true, 3)
	m.Drift("apps", "web", "ConfigMap", "kubectl-edit", true, time.Millisecond)
	m.Fight("apps", "web", "ConfigMap")
	m.ReconcileError("cattle-helm-system", "web")
	m.Denied("apps", "web", "ConfigMap")
	m.Reviewed(true)
	m.EventDropped("QueueFull")
	m.ObserveRender("apps", "web", "Stale", time.Millisecond)
	m.ReportWatching(func() bool { return true })
	q := m.WorkqueueProvider()
	q.NewDepthMetric("q")
	q.NewAddsMetric("q")
	q.NewLatencyMetric("q")
	q.NewWorkDurationMetric("q")
	q.NewUnfinishedWorkSecondsMetric("q")
	q.NewLongestRunningProcessorSecondsMetric("q")
	q.NewRetriesMetric("q")
	m.client.Increment(context.Background(), "200", "GET", "10.0.0.1:6443")
	(*clientLatency)(m.client).Observe(context.Background(), "GET", url.URL{Host: "10.0.0.1:6443"}, time.Millisecond)

	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]bool{}
	series := promql.Series{}
	for _, f := range families {
		gathered[f.GetName()] = true
		labels := map[string]bool{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = true
		}
		with := func(extra string) map[string]bool {
			out := map[string]bool{extra: true}
			for l := range labels {
				out[l] = true
			}
			return out
		}
		switch f.GetType().String() {
		case "HISTOGRAM":
			series[f.GetName()+"_bucket"] = with("le")
			series[f.GetName()+"_sum"], series[f.GetName()+"_count"] = labels, labels
		case "SUMMARY":
			series[f.GetName()] = with("quantile")
			series[f.GetName()+"_sum"], series[f.GetName()+"_count"] = labels, labels
		default:
			series[f.GetName()] = labels
		}
	}

	descs := make(chan *prometheus.Desc)
	go func() {
		m.registry.Describe(descs)
		close(descs)
	}()
	described := 0
	for desc := range descs {
		described++
		name := descName.FindStringSubmatch(desc.String())
		if name == nil {
			t.Fatalf("no name in %s", desc)
		}
		if !gathered[name[1]] {
			t.Errorf("%s is registered but has no series: give it one in exportedSeries", name[1])
		}
	}
	if described < 10 {
		t.Fatalf("the registry describes %d metrics; expected the locker's", described)
	}
	return series
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

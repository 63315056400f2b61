package metrics

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// dashboardFile is the Grafana dashboard shipped for the locker.
const dashboardFile = "../../deploy/dashboards/helm-locker.json"

// targetLabels are the labels Prometheus adds to every series it scrapes,
// which a query may select on though no metric has them.
var targetLabels = []string{"job", "instance"}

type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

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
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	series := exportedSeries(t)

	hasDatasource := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasource = hasDatasource || v.Name == "datasource" && string(v.Query) == `"prometheus"`
		case "query":
			var query struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &query); err != nil {
				// Grafana also takes the query as a plain string.
				_ = json.Unmarshal(v.Query, &query.Query)
			}
			for _, problem := range checkVariableQuery(query.Query, series) {
				t.Errorf("variable %s: %s", v.Name, problem)
			}
		}
	}
	if !hasDatasource {
		t.Errorf("the dashboard has no ${datasource} variable of type prometheus")
	}

	ids := map[int]bool{}
	var check func([]dashboardPanel)
	check = func(panels []dashboardPanel) {
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
			for _, target := range p.Targets {
				for _, problem := range checkExpr(target.Expr, series) {
					t.Errorf("panel %q: %s", p.Title, problem)
				}
			}
		}
	}
	check(d.Panels)
}

// exportedSeries returns the series the locker's registry exports, each
// with its labels: a counter or gauge under its name, a histogram under
// its _bucket (with le), _sum and _count. Every vector gets a series
// first, since Gather shows a family only once it has one; every
// collector the registry describes must then be among them.
func exportedSeries(t *testing.T) map[string]map[string]bool {
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
	series := map[string]map[string]bool{}
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

var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// grouping is a clause naming labels: by, without, on, ignoring,
	// group_left, group_right.
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	selector   = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	squares    = regexp.MustCompile(`\[[^\]]*\]`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	call       = regexp.MustCompile(`^\s*\(`)
	// labelValues is Grafana's variable query for a label's values.
	labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
)

// keywords are PromQL's words that are not metric names and not followed
// by a parenthesis (functions and aggregations are told by theirs).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// checkExpr returns what in a PromQL expression does not match series:
// metric names it does not export, and labels those metrics lack.
func checkExpr(expr string, series map[string]map[string]bool) []string {
	if strings.TrimSpace(expr) == "" {
		return []string{"empty query"}
	}
	var problems []string
	known := func(label string, of ...string) bool {
		if slices.Contains(targetLabels, label) {
			return true
		}
		for _, name := range of {
			if series[name][label] {
				return true
			}
		}
		return false
	}

	rest := stringLiteral.ReplaceAllString(expr, `""`)
	for _, s := range selector.FindAllStringSubmatch(rest, -1) {
		if s[1] == "" {
			problems = append(problems, "a selector without a metric name: "+s[0])
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(s[2], -1) {
			if _, ok := series[s[1]]; ok && !known(m[1], s[1]) {
				problems = append(problems, s[1]+" has no label "+m[1])
			}
		}
	}
	rest = selector.ReplaceAllString(rest, "$1 ")
	rest = squares.ReplaceAllString(rest, " ")
	var names, grouped []string
	for _, g := range grouping.FindAllStringSubmatch(rest, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouped = append(grouped, l)
			}
		}
	}
	rest = grouping.ReplaceAllString(rest, " ")
	for _, loc := range identifier.FindAllStringIndex(rest, -1) {
		word := rest[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(rest[loc[0]-1:loc[0]], "0123456789.") {
			continue // a number's exponent or a duration's unit
		}
		if keywords[word] || call.MatchString(rest[loc[1]:]) {
			continue
		}
		if _, ok := series[word]; !ok {
			problems = append(problems, "the locker exports no metric "+word)
			continue
		}
		names = append(names, word)
	}
	for _, l := range grouped {
		// With no metric known, the names above are the problem.
		if len(names) > 0 && !known(l, names...) {
			problems = append(problems, "groups by "+l+", a label none of "+strings.Join(names, ", ")+" has")
		}
	}
	return problems
}

// checkVariableQuery checks a variable's query: label_values(selector,
// label) needs the label on the selected metric.
func checkVariableQuery(query string, series map[string]map[string]bool) []string {
	lv := labelValues.FindStringSubmatch(query)
	if lv == nil {
		return checkExpr(query, series)
	}
	problems := checkExpr(lv[1], series)
	name := identifier.FindString(lv[1])
	if labels, ok := series[name]; ok && !labels[lv[2]] && !slices.Contains(targetLabels, lv[2]) {
		problems = append(problems, name+" has no label "+lv[2])
	}
	return problems
}

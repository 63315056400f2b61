package promql

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Query is one PromQL expression the project ships, and where it stands.
type Query struct {
	// Where names it for a reader: the panel, variable or alert.
	Where string
	Expr  string
	// Variable is a dashboard variable's query, which may be Grafana's
	// label_values(selector, label) rather than PromQL: check it with
	// CheckVariable.
	Variable bool
}

// Dashboard is the part of a Grafana dashboard's JSON that holds queries.
type Dashboard struct {
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; a collapsed row holds panels of its own.
type Panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// Expr is a query variable's query, which Grafana takes as an object or a
// plain string.
func (v Variable) Expr() string {
	var query struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &query); err != nil {
		_ = json.Unmarshal(v.Query, &query.Query)
	}
	return query.Query
}

// ReadDashboard reads a Grafana dashboard's JSON.
func ReadDashboard(data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("the dashboard is not valid JSON: %w", err)
	}
	return &d, nil
}

// Queries are every panel's targets, rows' panels included, and every
// query variable's query.
func (d *Dashboard) Queries() []Query {
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out = append(out, Query{Where: "variable " + v.Name, Expr: v.Expr(), Variable: true})
		}
	}
	var walk func([]Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			walk(p.Panels)
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q", p.Title), Expr: t.Expr})
			}
		}
	}
	walk(d.Panels)
	return out
}

// ReadRules reads the alerts and recording rules of a PrometheusRule.
func ReadRules(data []byte) ([]Query, error) {
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					Expr   string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		return nil, fmt.Errorf("reading a PrometheusRule: %w", err)
	}
	if rule.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("reading a PrometheusRule: the document is a %q", rule.Kind)
	}
	var out []Query
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Record != "" {
				where = "record " + r.Record
			}
			out = append(out, Query{Where: where, Expr: r.Expr})
		}
	}
	return out, nil
}

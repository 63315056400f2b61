package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// rulesTestFile is promtool's unit test of the chart's alerts; it reads
// the rules from rules.yaml beside it.
const rulesTestFile = "testdata/alerts_test.yaml"

// prometheusRule is the part of a PrometheusRule the tests read.
type prometheusRule struct {
	Kind string `json:"kind"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestChartAlertRules renders the chart's PrometheusRule and holds it to
// promtool: `promtool check rules` on its groups, and `promtool test
// rules` on testdata/alerts_test.yaml. Each alert needs a summary, a
// description and a runbook_url naming a section of
// docs/troubleshooting.md. promtool comes from hack/promtool.sh; without
// it the test fails, since `make test` must check the rules.
func TestChartAlertRules(t *testing.T) {
	if out := renderChart(t, nil)["helm-locker/templates/prometheusrule.yaml"]; len(documents(out)) != 0 {
		t.Errorf("the chart renders a PrometheusRule by default:\n%s", out)
	}
	out := renderChart(t, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{
		"enabled":          true,
		"additionalLabels": map[string]any{"release": "kube-prometheus-stack"},
		"runbookBaseURL":   "https://example.com/troubleshooting.md/",
	}}})
	doc := out["helm-locker/templates/prometheusrule.yaml"]
	var rule prometheusRule
	if err := yaml.Unmarshal([]byte(doc), &rule); err != nil {
		t.Fatalf("the PrometheusRule: %v\n%s", err, doc)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("the chart renders no PrometheusRule with groups:\n%s", doc)
	}
	if !strings.Contains(doc, "release: kube-prometheus-stack") {
		t.Errorf("the PrometheusRule lacks its additionalLabels:\n%s", doc)
	}

	// Without the webhook, its probe's gauge stays 0: its alerts would
	// fire for good.
	noWebhook := renderChart(t, map[string]any{
		"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}},
		"webhook": map[string]any{"enabled": false},
	})["helm-locker/templates/prometheusrule.yaml"]
	if strings.Contains(noWebhook, "webhook_probe") || strings.Contains(noWebhook, "reviews_shed") {
		t.Errorf("with webhook.enabled false, the PrometheusRule still alerts on the webhook:\n%s", noWebhook)
	}

	anchors := troubleshootingAnchors(t)
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			section, ok := strings.CutPrefix(r.Annotations["runbook_url"], "https://example.com/troubleshooting.md#")
			if !ok || !anchors[section] {
				t.Errorf("alert %s: runbook_url %q names no section of docs/troubleshooting.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}

	dir := t.TempDir()
	groups, err := yaml.Marshal(map[string]any{"groups": yamlField(t, doc, "spec", "groups")})
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, groups, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool := promtoolPath(t)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// yamlField returns the field at path in a YAML document, as it is.
func yamlField(t *testing.T, doc string, path ...string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %s in the document", strings.Join(path, "."))
		}
		v = m[p]
	}
	return v
}

// troubleshootingAnchors are the anchors GitHub gives the sections of
// docs/troubleshooting.md: the heading lower-cased, spaces as hyphens,
// punctuation other than hyphens and underscores dropped.
func troubleshootingAnchors(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	punctuation := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if heading, ok := strings.CutPrefix(line, "## "); ok {
			a := punctuation.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
			anchors[strings.ReplaceAll(a, " ", "-")] = true
		}
	}
	return anchors
}

// promtoolPath is HELM_LOCKER_PROMTOOL (the Makefile's test-unit sets it
// from hack/promtool.sh), or what hack/promtool.sh prints.
func promtoolPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM_LOCKER_PROMTOOL"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join("..", "..", "hack", "promtool.sh")).Output()
	if err != nil {
		t.Fatalf("no promtool: hack/promtool.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

package promql

import (
	"regexp"
	"slices"
	"strings"
)

// Series are metric names, each with the labels its series carry: a
// histogram under its _bucket (with le), _sum and _count.
type Series map[string]map[string]bool

// TargetLabels are the labels Prometheus adds to every series it scrapes,
// which a query may select on though no metric has them.
var TargetLabels = []string{"job", "instance"}

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

// Check returns what in a PromQL expression does not match series: metric
// names it lacks, and labels those metrics lack.
func Check(expr string, series Series) []string {
	if strings.TrimSpace(expr) == "" {
		return []string{"empty query"}
	}
	var problems []string
	known := func(label string, of ...string) bool {
		if slices.Contains(TargetLabels, label) {
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
			problems = append(problems, "no series "+word)
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

// CheckVariable checks a dashboard variable's query: label_values(selector,
// label) needs the label on the selected metric.
func CheckVariable(query string, series Series) []string {
	lv := labelValues.FindStringSubmatch(query)
	if lv == nil {
		return Check(query, series)
	}
	problems := Check(lv[1], series)
	name := identifier.FindString(lv[1])
	if labels, ok := series[name]; ok && !labels[lv[2]] && !slices.Contains(TargetLabels, lv[2]) {
		problems = append(problems, name+" has no label "+lv[2])
	}
	return problems
}

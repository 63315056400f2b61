// Package promql reads the PromQL the project ships, its Grafana
// dashboard's queries and its chart's alert rules, and checks what each
// expression selects against a set of series: the metrics the locker's
// registry describes (a unit test), or what a fresh locker's /metrics
// shows (an e2e test), so that no panel or alert queries a series that is
// misspelled, gone, or absent until its first event.
//
// It is a reader for tests, not a PromQL parser: it knows selectors,
// matchers, grouping clauses, ranges and function calls, which is all the
// shipped queries use.
package promql

package main

import "testing"

func TestTermsLostGoal(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name         string
		series       []*scenarioResult
		counted, met bool
		value        string
	}{
		{name: "a report from before the count", series: []*scenarioResult{{Burst: &scenarioResult{}}, {}}},
		{name: "none lost", series: []*scenarioResult{{TermsLost: n(0), Burst: &scenarioResult{TermsLost: n(0)}}, {TermsLost: n(0)}},
			counted: true, met: true, value: "0, in 3 lockers' logs"},
		{name: "one lost in a burst", series: []*scenarioResult{{TermsLost: n(0), Burst: &scenarioResult{TermsLost: n(1)}}, {TermsLost: n(0)}},
			counted: true, value: "1, in 3 lockers' logs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, counted := termsLostGoal(tc.series)
			if counted != tc.counted || (counted && (g.met != tc.met || g.value != tc.value)) {
				t.Errorf("termsLostGoal = %+v, counted %v; want counted %v, met %v, value %q", g, counted, tc.counted, tc.met, tc.value)
			}
		})
	}
}

func TestSeriesWhen(t *testing.T) {
	for _, tc := range []struct {
		seriesDate, date, want string
	}{
		{seriesDate: "2026-12-01T15:52:25Z", date: "2026-12-01T19:51:54Z", want: "before"},
		{seriesDate: "2026-12-01T07:10:00Z", date: "2026-12-01T05:39:57Z", want: "after"},
	} {
		if got := seriesWhen(&report{Date: tc.date, SeriesDate: tc.seriesDate}); got != tc.want {
			t.Errorf("seriesWhen(series %s, sections %s) = %q, want %q", tc.seriesDate, tc.date, got, tc.want)
		}
	}
}

package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestDeriveFitsTheGrowthRows(t *testing.T) {
	const mib = 1 << 20
	base := params{Releases: 200, Objects: 25, Untracked: 20000}
	row := func(dim string, factor int, rss, heap float64) growthRow {
		return growthRow{Dimension: dim, Factor: factor, Params: base.scaled(dim, factor), RSSMiB: rss, HeapMiB: heap}
	}
	rep := &report{
		Base: &scenarioResult{Params: base},
		Growth: []growthRow{
			row("base", 1, 60, 20),
			// Locked objects: exactly 2048 B of RSS and 1024 B of heap
			// each.
			row("M", 2, 60+5000*2048.0/mib, 20+5000*1024.0/mib),
			row("M", 4, 60+15000*2048.0/mib, 20+15000*1024.0/mib),
			// Untracked objects: 100 B each, with 0.5 MiB of noise in the
			// 2x run that makes 2x - 1x negative.
			row("B", 2, 60+20000*100.0/mib-0.5, 20),
			row("B", 4, 60+60000*100.0/mib, 20),
			// More releases cost more per object (a CR, a release
			// Secret, lock state each): 3072 B.
			row("N", 2, 60+5000*3072.0/mib, 500),
			row("N", 4, 60+15000*3072.0/mib, 500),
		},
	}
	d := derive(rep)
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"RSS per locked object by M", d.BytesPerLockedObjectByM, 2048},
		{"RSS per locked object by N", d.BytesPerLockedObjectByN, 3072},
		{"RSS per locked object, the larger", d.BytesPerLockedObject, 3072},
		{"heap per locked object", d.HeapPerLockedObject, 1024},
		{"heap per untracked object", d.HeapPerUntrackedObject, 0},
	} {
		if math.Abs(tc.got-tc.want) > 1e-6 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// The fit keeps the noisy run from making the figure negative.
	if got := d.BytesPerUntrackedObject; got < 50 || got > 150 {
		t.Errorf("RSS per untracked object = %v, want about 100", got)
	}
}

// TestSmallRSSTarget: the report's targets hold the small scenario's RSS,
// file-backed pages included, to smallRSSTarget.
func TestSmallRSSTarget(t *testing.T) {
	for _, tt := range []struct {
		anon, file float64
		met        string
	}{
		{anon: 20, file: 22, met: "| yes |"},
		{anon: 20, file: 50, met: "| no |"},
	} {
		rep := &report{Base: &scenarioResult{}, Small: &scenarioResult{Params: smallParams, RSSMiB: tt.anon + tt.file, RSSAnonMiB: tt.anon, RSSFileMiB: tt.file}}
		row := targetRow(rep, "at 1000 locked objects")
		want := fmt.Sprintf("**%.1f** | %d.0 %s", tt.anon+tt.file, smallRSSTarget, tt.met)
		if !strings.Contains(row, want) {
			t.Errorf("the small scenario's target row = %q, want it to contain %q", row, want)
		}
	}
}

// TestSeriesGoals: the series' memory target is the slope between its two
// largest rows, as the target is stated, and each target it misses says
// why from the same run's figures.
func TestSeriesGoals(t *testing.T) {
	const mib = 1 << 20
	row := func(objects int, rss, coldLock, floor float64) *scenarioResult {
		return &scenarioResult{
			Params: params{Releases: objects / seriesRelease, Objects: seriesRelease, Untracked: objects},
			RSSMiB: rss, HeapMiB: rss / 2, ColdLockS: coldLock, FloorS: floor, ObjectsPerS: float64(objects) / coldLock,
			Floor: distribution{P50: 5, P99: 10}, Single: distribution{P50: 6, P99: 12, Count: 200},
		}
	}
	series := []*scenarioResult{
		// The smallest row's RSS would tilt a fit over all three.
		row(25000, 300, 10, 5),
		row(50000, 200, 25, 12),
		row(100000, 200+50000*1000.0/mib, 50, 25),
	}
	series[2].StatusChurn = &statusChurnResult{CPUPerEvent: 180, FloorPerEvent: 150}
	goals := map[string]seriesGoal{}
	for _, g := range seriesGoals(series) {
		goals[g.name] = g
	}
	for _, tt := range []struct {
		name, value string
		met         bool
		why         string
	}{
		{"RSS per locked object, the slope from 50000 to 100000 (one untracked object each included)", "1000 bytes", true, ""},
		{"cold lock at 25000, CRs before the start", "2500 objects/s", true, ""},
		{"cold lock at 100000, CRs before the start", "2000 objects/s", true, ""},
		{"cold lock at 50000, CRs before the start", "2000 objects/s", true, ""},
		{"cold lock / list-and-watch floor at 25000, CRs before the start", "2.0×", true, ""},
		{"cold lock / list-and-watch floor at 100000, CRs before the start", "2.0×", true, ""},
		{"revert p99 / floor p99, after the cold lock", "1.20×", true, ""},
		{"CPU per status event", "180.0 µs (a bare watcher: 150.0 µs)", false, "spends 150.0 µs an event on this machine, 7.5× the target"},
	} {
		g, ok := goals[tt.name]
		if !ok {
			t.Errorf("no goal %q", tt.name)
			continue
		}
		if g.value != tt.value || g.met != tt.met || !strings.Contains(g.why, tt.why) {
			t.Errorf("%s: %q met %v (%s), want %q met %v with %q", tt.name, g.value, g.met, g.why, tt.value, tt.met, tt.why)
		}
	}
	// A cold lock too slow for 2,000 objects/s says what that rate would
	// take against its floor.
	series[1].ColdLockS, series[1].ObjectsPerS = 50, 1000
	for _, g := range seriesGoals(series) {
		if g.name == "cold lock at 50000, CRs before the start" {
			if want := "2,000 objects/s is 25.0 s here, 2.08× this run's floor of 12.00 s, and the cold lock took 4.17×"; g.met || !strings.Contains(g.why, want) {
				t.Errorf("%s: met %v, why %q, want it missed with %q", g.name, g.met, g.why, want)
			}
		}
	}
}

// TestSlopeWithinNoise: a slope over rows whose RSS scatters by more than
// the objects add is reported with its interval, and the targets say
// neither met nor missed of it; the same rows in a line say met.
func TestSlopeWithinNoise(t *testing.T) {
	const mib = 1 << 20
	base := params{Releases: 200, Objects: 25, Untracked: 20000}
	for _, tt := range []struct {
		name         string
		rss          [3]float64 // MiB at 1×, 2×, 4× N
		met          string
		wantInterval bool
	}{
		// 2026-11-30's rows: the base read 15 MiB over the 2× row.
		{"scattered", [3]float64{57.14, 49.65, 66.33}, "| cannot tell: within the run's noise |", true},
		{"in a line", [3]float64{40, 40 + 5000*1000.0/mib, 40 + 15000*1000.0/mib}, "| yes |", false},
		{"in a line, over the target", [3]float64{40, 40 + 5000*5000.0/mib, 40 + 15000*5000.0/mib}, "| no |", false},
		{"nearly in a line, well under", [3]float64{40, 40.5 + 5000*1000.0/mib, 40 + 15000*1000.0/mib}, "| yes |", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			row := func(dim string, factor int, rss float64) growthRow {
				return growthRow{Dimension: dim, Factor: factor, Params: base.scaled(dim, factor), RSSMiB: rss, HeapMiB: 10}
			}
			rep := &report{Base: &scenarioResult{Params: base}, Growth: []growthRow{
				row("base", 1, tt.rss[0]), row("N", 2, tt.rss[1]), row("N", 4, tt.rss[2]),
				row("M", 2, tt.rss[0]), row("M", 4, tt.rss[0]),
				row("B", 2, tt.rss[0]), row("B", 4, tt.rss[0]),
			}}
			rep.Derived = derive(rep)
			if got := rep.Derived.BytesPerLockedObject95 >= 1; got != tt.wantInterval {
				t.Errorf("interval %v, want one: %v", rep.Derived.BytesPerLockedObject95, tt.wantInterval)
			}
			line := targetRow(rep, "RSS per locked object, the larger slope")
			if !strings.Contains(line, tt.met) {
				t.Errorf("target row %q, want %q", line, tt.met)
			}
			if tt.wantInterval && !strings.Contains(line, " ± ") {
				t.Errorf("target row %q gives no interval", line)
			}
		})
	}
}

// TestT95: the interval narrows with the rows, and past the table stays
// at its last row's width, wider than the true quantile.
func TestT95(t *testing.T) {
	for _, tt := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {3, 3.182}, {10, 2.228}, {40, 2.228}} {
		if got := t95(tt.df); got != tt.want {
			t.Errorf("t95(%d) = %v, want %v", tt.df, got, tt.want)
		}
	}
}

// targetRow is the line of rep's Targets table whose figure names name.
func targetRow(rep *report, name string) string {
	var b strings.Builder
	targets(&b, rep)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if strings.Contains(line, name) {
			return line
		}
	}
	return ""
}

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
		var b strings.Builder
		targets(&b, rep)
		var row string
		for line := range strings.SplitSeq(b.String(), "\n") {
			if strings.Contains(line, "at 1000 locked objects") {
				row = line
			}
		}
		want := fmt.Sprintf("**%.1f** | %d.0 %s", tt.anon+tt.file, smallRSSTarget, tt.met)
		if !strings.Contains(row, want) {
			t.Errorf("the small scenario's target row = %q, want it to contain %q", row, want)
		}
	}
}

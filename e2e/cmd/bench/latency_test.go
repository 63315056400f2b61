package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSlowest(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name      string
		durations []time.Duration
		n         int
		want      []timedSample
	}{
		{"none", nil, 5, []timedSample{}},
		{"fewer than asked", []time.Duration{ms(3), ms(9)}, 5, []timedSample{{at(1), ms(9)}, {at(0), ms(3)}}},
		{"the longest, each with its own time", []time.Duration{ms(5), ms(70), ms(6), ms(68), ms(4)}, 2, []timedSample{{at(1), ms(70)}, {at(3), ms(68)}}},
		{"ties keep their order", []time.Duration{ms(8), ms(8), ms(1)}, 2, []timedSample{{at(0), ms(8)}, {at(1), ms(8)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make([]time.Time, len(tc.durations))
			for i := range started {
				started[i] = at(i)
			}
			got := slowest(tc.durations, started, tc.n)
			if len(got) != len(tc.want) {
				t.Fatalf("slowest = %v, want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].at.Equal(tc.want[i].at) || got[i].d != tc.want[i].d {
					t.Errorf("slowest[%d] = %v at %v, want %v at %v", i, got[i].d, got[i].at, tc.want[i].d, tc.want[i].at)
				}
			}
		})
	}
}

func TestSamplesSummarizeKeepsTimes(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	s := samples{
		durations: []time.Duration{40 * time.Millisecond, 2 * time.Millisecond, 90 * time.Millisecond},
		started:   []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)},
	}
	d := s.summarize()
	if len(d.slowest) != 3 || d.slowest[0].d != 90*time.Millisecond || !d.slowest[0].at.Equal(t0.Add(2*time.Second)) ||
		d.slowest[1].d != 40*time.Millisecond || !d.slowest[1].at.Equal(t0) {
		t.Errorf("slowest = %v, want 90ms at +2s, then 40ms at +0s", d.slowest)
	}
	if d.P50 != 40 || d.Max != 90 {
		t.Errorf("p50, max = %v, %v ms, want 40, 90", d.P50, d.Max)
	}
}

func TestKeepControlPlaneLogs(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep bool
	}{{"with -profiles", true}, {"without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, out := t.TempDir(), t.TempDir()
			saved := profiles
			t.Cleanup(func() { profiles = saved })
			profiles = ""
			if tc.keep {
				profiles = out
			}
			if err := os.WriteFile(filepath.Join(dir, "kube-apiserver.log"), []byte("gc 1 @0.060s"), 0o644); err != nil {
				t.Fatal(err)
			}
			keepControlPlaneLogs(dir)
			kept, err := filepath.Glob(filepath.Join(out, "kube-apiserver-*.log"))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(kept) == 1; got != tc.keep {
				t.Fatalf("kept %v, want one kept: %v", kept, tc.keep)
			}
			if tc.keep {
				if data, _ := os.ReadFile(kept[0]); string(data) != "gc 1 @0.060s" {
					t.Errorf("kept %q", data)
				}
			}
		})
	}
}

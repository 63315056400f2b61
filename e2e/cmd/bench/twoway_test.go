package main

import (
	"math"
	"strings"
	"testing"
)

// TestTwoWayRatio: the ratio is of the medians, each round's own ratio
// bounds it, and a spread of Off's rounds wider than the difference is
// said to hide it.
func TestTwoWayRatio(t *testing.T) {
	rounds := func(rates ...float64) []twoWayRound {
		var out []twoWayRound
		for _, r := range rates {
			out = append(out, twoWayRound{ObjectsPerS: r, ColdLockS: 5000 / r})
		}
		return out
	}
	res := &twoWayResult{Params: params{Releases: 200, Objects: 25}, Off: rounds(1000, 1100, 900), Report: rounds(950, 1000, 990)}
	median, least, greatest := res.ratio()
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"median", median, 0.99}, {"least", least, 1000.0 / 1100}, {"greatest", greatest, 1.1}} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	b := &strings.Builder{}
	twoWayMarkdown(b, res)
	if !strings.Contains(b.String(), "**0.99×** (rounds 0.91× to 1.10×)") || !strings.Contains(b.String(), "does not resolve a difference of that size") || !strings.Contains(b.String(), "In 2 of 3 rounds Report's cold lock was slower") {
		t.Errorf("markdown:\n%s", b)
	}
	if got := medianOf([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
}

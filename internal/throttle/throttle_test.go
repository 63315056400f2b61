package throttle

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// ask is one call of Allow at a time after the start, and what it should
// answer: passed, or held back until next (after the start), and the
// interval it names.
type ask struct {
	at       time.Duration
	allowed  bool
	next     time.Duration
	interval time.Duration
	capped   bool
}

func TestAllow(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		opts Options
		asks []ask
	}{
		{"the first passes", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
		}},
		{"held back until the interval is over", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
			{at: 1 * s, next: 5 * s, interval: 5 * s},
			{at: 4 * s, next: 5 * s, interval: 5 * s},
		}},
		{"a steady pace keeps the interval", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
			{at: 10 * s, allowed: true, interval: 5 * s},
			{at: 20 * s, allowed: true, interval: 5 * s},
			{at: 31 * s, allowed: true, interval: 5 * s},
		}},
		// Asked for every second: it passes at 0, 5, 15, 35 and 75 s,
		// each interval twice the one before.
		{"doubles while asked for again and again", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
			{at: 1 * s, next: 5 * s, interval: 5 * s},
			{at: 5 * s, allowed: true, interval: 10 * s},
			{at: 6 * s, next: 15 * s, interval: 10 * s},
			{at: 15 * s, allowed: true, interval: 20 * s},
			{at: 34 * s, next: 35 * s, interval: 20 * s},
			{at: 35 * s, allowed: true, interval: 40 * s},
			{at: 60 * s, next: 75 * s, interval: 40 * s},
			{at: 75 * s, allowed: true, interval: 80 * s},
		}},
		{"asked again within twice the interval, not held back, doubles too", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
			{at: 6 * s, allowed: true, interval: 10 * s},
			{at: 16 * s, allowed: true, interval: 20 * s},
		}},
		{"a quiet spell sets it back", Options{Interval: 5 * s}, []ask{
			{at: 0, allowed: true, interval: 5 * s},
			{at: 5 * s, allowed: true, interval: 10 * s},
			{at: 15 * s, allowed: true, interval: 20 * s},
			{at: 55 * s, allowed: true, interval: 5 * s},
			{at: 56 * s, next: 60 * s, interval: 5 * s},
		}},
		{"doubling stops at an hour", Options{Interval: 40 * time.Minute, MaxPerHour: 100}, []ask{
			{at: 0, allowed: true, interval: 40 * time.Minute},
			{at: 40 * time.Minute, allowed: true, interval: time.Hour},
			{at: 100 * time.Minute, allowed: true, interval: time.Hour},
			{at: 101 * time.Minute, next: 160 * time.Minute, interval: time.Hour},
		}},
		// Three an hour: the fourth waits until the first is an hour
		// old, though the interval is long over.
		{"capped per hour", Options{Interval: time.Minute, MaxPerHour: 3}, []ask{
			{at: 0, allowed: true, interval: time.Minute},
			{at: 10 * time.Minute, allowed: true, interval: time.Minute},
			{at: 20 * time.Minute, allowed: true, interval: time.Minute},
			{at: 30 * time.Minute, next: 60 * time.Minute, interval: time.Minute, capped: true},
			{at: 60 * time.Minute, allowed: true, interval: time.Minute},
			{at: 65 * time.Minute, next: 70 * time.Minute, interval: time.Minute, capped: true},
		}},
		{"the defaults", Options{}, []ask{
			{at: 0, allowed: true, interval: DefaultInterval},
			{at: 30 * s, next: DefaultInterval, interval: DefaultInterval},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakePassiveClock(start)
			th := New[string](tt.opts, clk)
			for i, a := range tt.asks {
				clk.SetTime(start.Add(a.at))
				got := th.Allow("apps/web")
				want := Decision{Allowed: a.allowed, Interval: a.interval, Capped: a.capped}
				if a.allowed {
					want.Last = start.Add(a.at)
				} else {
					want.Next = start.Add(a.next)
					got.Last = time.Time{}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("ask %d, at %s (-want +got):\n%s", i, a.at, diff)
				}
			}
		})
	}
}

// TestKeysApart: each key has its own interval and count.
func TestKeysApart(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	th := New[string](Options{Interval: time.Minute, MaxPerHour: 1}, clk)
	if !th.Allow("a").Allowed || !th.Allow("b").Allowed {
		t.Fatal("the first pass of each key was held back")
	}
	if d := th.Allow("a"); d.Allowed || !d.Capped {
		t.Errorf("a's second pass within the hour = %+v, want held back by the cap", d)
	}
}

// TestForgetsIdleKeys: a key that would pass as if it never had is
// forgotten, so that the keys asked for once do not pile up.
func TestForgetsIdleKeys(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	th := New[string](Options{Interval: time.Minute}, clk)
	for i := range 100 {
		th.Allow(fmt.Sprint(i))
	}
	clk.SetTime(start.Add(59 * time.Minute))
	th.Allow("now")
	if n := th.Len(); n != 101 {
		t.Errorf("%d keys remembered within the hour, want 101", n)
	}
	clk.SetTime(start.Add(time.Hour))
	th.Allow("now")
	if n := th.Len(); n != 1 {
		t.Errorf("%d keys remembered an hour later, want the one asked for since", n)
	}
}

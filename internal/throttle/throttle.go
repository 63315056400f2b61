package throttle

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Hour is the span MaxPerHour counts passes over.
const Hour = time.Hour

// Options bound the passes of each key. The zero value of a field takes
// its default.
type Options struct {
	// Interval is the least time between two passes of a key while it
	// is asked for at a steady pace: DefaultInterval if zero.
	Interval time.Duration
	// MaxPerHour is how many times a key may pass within any hour:
	// DefaultMaxPerHour if zero.
	MaxPerHour int
}

// Defaults of Options.
const (
	DefaultInterval   = time.Minute
	DefaultMaxPerHour = 10
)

// Decision is what Allow answers.
type Decision struct {
	// Allowed says the key passes now; the pass is counted.
	Allowed bool
	// Next is, when the key did not pass, the earliest time it may.
	Next time.Time
	// Last is when the key last passed; zero if it never did.
	Last time.Time
	// Interval is the least time after Last before the key passes
	// again: Options.Interval, doubled for each pass asked for within
	// twice the interval before it.
	Interval time.Duration
	// Capped says Next is MaxPerHour's, not Interval's: the key passed
	// MaxPerHour times within the hour before it.
	Capped bool
}

// Throttle decides, for each key, whether it may pass now. Its methods
// may be called from several goroutines.
type Throttle[K comparable] struct {
	opts  Options
	clock clock.PassiveClock
	mu    sync.Mutex
	keys  map[K]*history
}

// history is what a Throttle remembers of one key.
type history struct {
	// passes are the key's passes within the last hour, oldest first.
	passes []time.Time
	// last is the key's last pass, and interval the least time after it
	// before the next.
	last     time.Time
	interval time.Duration
}

// New returns a Throttle of opts that reads the time from clk.
func New[K comparable](opts Options, clk clock.PassiveClock) *Throttle[K] {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxPerHour <= 0 {
		opts.MaxPerHour = DefaultMaxPerHour
	}
	return &Throttle[K]{opts: opts, clock: clk, keys: map[K]*history{}}
}

// Allow reports whether key may pass now and, if it may, counts the pass.
// A key passes once the interval after its last pass is over and it
// passed fewer than MaxPerHour times in the last hour. A pass asked for
// within twice the interval after the last one (as one held back is, at
// the end of the interval) says that what makes the key ask keeps
// changing: the interval after it doubles, up to an hour. One asked for
// later sets it back to Options.Interval.
func (t *Throttle[K]) Allow(key K) Decision {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetIdle(now)
	h := t.keys[key]
	if h == nil {
		h = &history{interval: t.opts.Interval}
		t.keys[key] = h
	}
	h.passes = recent(h.passes, now)
	if !h.last.IsZero() {
		next, capped := h.last.Add(h.interval), false
		if n := len(h.passes); n >= t.opts.MaxPerHour {
			if at := h.passes[n-t.opts.MaxPerHour].Add(Hour); at.After(next) {
				next, capped = at, true
			}
		}
		if now.Before(next) {
			return Decision{Next: next, Last: h.last, Interval: h.interval, Capped: capped}
		}
		if now.Before(h.last.Add(2 * h.interval)) {
			h.interval = min(2*h.interval, Hour)
		} else {
			h.interval = t.opts.Interval
		}
	}
	h.last = now
	h.passes = append(h.passes, now)
	return Decision{Allowed: true, Last: now, Interval: h.interval}
}

// recent drops the passes older than an hour before now.
func recent(passes []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(passes) && !passes[i].After(now.Add(-Hour)) {
		i++
	}
	return passes[i:]
}

// forgetIdle drops the keys that would pass now as if they never had: no
// pass within the hour, and none within twice their interval, so that a
// key asked for once and never again is not remembered for good.
func (t *Throttle[K]) forgetIdle(now time.Time) {
	for key, h := range t.keys {
		if !now.Before(h.last.Add(Hour)) && !now.Before(h.last.Add(2*h.interval)) {
			delete(t.keys, key)
		}
	}
}

// Len is how many keys the Throttle remembers.
func (t *Throttle[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys)
}

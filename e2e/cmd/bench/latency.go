package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
)

const editTimeout = 10 * time.Second

// measureLatency measures, in one run:
//   - the floor: an edit of an untracked ConfigMap until its own watch event
//     arrives, which is one PATCH round trip plus the API server's watch
//     delivery, and which no locker can beat;
//   - single edits of locked ConfigMaps, one after another;
//   - rounds of concurrent edits of locked ConfigMaps in distinct releases,
//     and the floor under the same concurrency;
//   - bursts of edits to one release sent back to back (see backToBack).
//
// Revert latency runs from the watch event that shows the edit, the moment
// the drift exists for any watcher, to the one that shows the value
// restored. The floor is one write timed like the revert's: from its
// request to its own event. Timed from the edit's response instead, a
// revert under load looked faster than the floor (0.72x): the response
// can come after the locker has already seen the event.
func measureLatency(ctx context.Context, dyn dynamic.Interface, cw *configMapWatch, locked map[string][]ref, full *fullMeasure, res *scenarioResult, quiet func() error) error {
	var releases []string
	for name := range locked {
		releases = append(releases, name)
	}
	sort.Strings(releases)
	lockedCM := func(i int) ref {
		cms := locked[releases[i%len(releases)]]
		return cms[1+(i/len(releases))%(len(cms)-1)] // cms[0] was drifted at start
	}
	// Untracked object j is in namespace noise-(j / untrackedPerNamespace)
	// and is a ConfigMap when j%5 == 0 (see addUntracked).
	untrackedCM := func(i int) ref {
		j := (5 * i) % (res.Params.Untracked - res.Params.Untracked%5)
		return ref{ns: fmt.Sprintf("noise-%d", j/untrackedPerNamespace), name: fmt.Sprintf("u%06d", j)}
	}

	// floorSample edits an untracked object and times it to its own event.
	floorSample := func(i int, tag string) (time.Duration, bool, error) {
		r := untrackedCM(i)
		value := fmt.Sprintf("%s-%d", tag, i)
		sent, _, rv, err := edit(ctx, dyn, r, value)
		if err != nil {
			return 0, false, err
		}
		return waitFor(cw.wait(r.ns+"/"+r.name, value, rv-1), sent)
	}
	// revertSample edits a locked object and times it to its restoration.
	revertSample := func(i int, tag string) (time.Duration, bool, error) {
		return timedEdit(ctx, dyn, cw, lockedCM(i), fmt.Sprintf("%s-%d", tag, i))
	}

	// The floor's samples and the reverts run in turns, so that both
	// meet the same load: the churn, the locker's bookkeeping of earlier
	// reverts, and whatever else the machine does meanwhile.
	floor := func(tag string) sampler {
		return func(i int) (time.Duration, bool, error) { return floorSample(i, tag) }
	}
	revert := func(tag string, offset int) sampler {
		return func(i int) (time.Duration, bool, error) { return revertSample(i+offset, tag) }
	}
	singles := full.edits
	if full.singleEdits > 0 {
		singles = full.singleEdits
	}
	var err error
	if res.Floor, res.Single, err = interleaved(singles, 1, floor("floor"), revert("single", 0), nil); err != nil {
		return err
	}
	res.Floor.logSlowest("floor edits")
	res.Single.logSlowest("single reverts")
	// The locker records each revert a moment later (an event and the
	// status counts, see bookkeepingDelay in internal/controller); each
	// concurrent round starts once that has drained.
	rounds := max(1, full.edits/full.concurrency)
	if res.ConcurrentFloor, res.Concurrent, err = interleaved(rounds, full.concurrency, floor("cfloor"), revert("concurrent", singles), quiet); err != nil {
		return err
	}
	if err := quiet(); err != nil {
		return err
	}
	// Three ConfigMaps of a release that the other phases do not edit
	// (never cms[0], which was drifted at start).
	burstObjects := func(i int) []ref {
		cms := locked[releases[i%len(releases)]]
		objs := make([]ref, 3)
		for j := range objs {
			objs[j] = cms[len(cms)-1-j%(len(cms)-1)]
		}
		return objs
	}
	res.BackToBack, err = backToBack(ctx, dyn, cw, max(1, full.edits/burst), burstObjects)
	return err
}

// burst is how many edits backToBack sends to one release at a time.
const burst = 5

// backToBack sends bursts of edits to three objects of one release, A B C A
// B, each sent as soon as the one before is answered, one release after
// another. Every edit must be reverted, the first of two edits to one
// object too: each edit's sample runs from its response to the first
// event after it that shows its object restored.
func backToBack(ctx context.Context, dyn dynamic.Interface, cw *configMapWatch, releases int, objects func(i int) []ref) (distribution, error) {
	var samples []time.Duration
	timeouts := 0
	for i := range releases {
		objs := objects(i)
		type sent struct {
			seen, restored <-chan time.Time
		}
		var edits []sent
		for k := range burst {
			r := objs[k%len(objs)]
			key := r.ns + "/" + r.name
			seen := cw.wait(key, fmt.Sprintf("b2b-%d-%d", i, k), cw.lastRV(key))
			_, _, rv, err := edit(ctx, dyn, r, fmt.Sprintf("b2b-%d-%d", i, k))
			if err != nil {
				return distribution{}, err
			}
			edits = append(edits, sent{seen, cw.wait(key, "declared", rv)})
		}
		for _, e := range edits {
			d, ok, err := fromEvent(e.seen, e.restored)
			switch {
			case err != nil:
				return distribution{}, err
			case !ok:
				timeouts++
			default:
				samples = append(samples, d)
			}
		}
	}
	return summarize(samples, timeouts), nil
}

// timedEdit edits r and returns the time from the watch event that shows
// the edit to the one that shows r restored.
func timedEdit(ctx context.Context, dyn dynamic.Interface, cw *configMapWatch, r ref, value string) (time.Duration, bool, error) {
	key := r.ns + "/" + r.name
	// Waited for from before the edit: the restoration may follow so
	// fast that the edit is no longer the last state seen.
	seen := cw.wait(key, value, cw.lastRV(key))
	_, _, rv, err := edit(ctx, dyn, r, value)
	if err != nil {
		return 0, false, err
	}
	return fromEvent(seen, cw.wait(key, "declared", rv))
}

// fromEvent returns the time from the first event to the second, or false
// on timeout.
func fromEvent(first, second <-chan time.Time) (time.Duration, bool, error) {
	select {
	case at := <-first:
		return waitFor(second, at)
	case <-time.After(editTimeout):
		return 0, false, nil
	}
}

// waitFor returns the time from since to the event, or false on timeout.
func waitFor(event <-chan time.Time, since time.Time) (time.Duration, bool, error) {
	select {
	case at := <-event:
		return at.Sub(since), true, nil
	case <-time.After(editTimeout):
		return 0, false, nil
	}
}

// sampler takes sample i: its duration, or false if it timed out.
type sampler func(i int) (time.Duration, bool, error)

// interleaved takes rounds of width samples released at the same instant
// (width 1: one sample), of floor and of measured in turns: floor's round
// k, then measured's round k. settle, if set, runs before every round.
func interleaved(rounds, width int, floor, measured sampler, settle func() error) (distribution, distribution, error) {
	var f, m samples
	for round := range rounds {
		for _, turn := range []struct {
			s   *samples
			run sampler
		}{{&f, floor}, {&m, measured}} {
			if settle != nil {
				if err := settle(); err != nil {
					return distribution{}, distribution{}, err
				}
			}
			if err := turn.s.round(round*width, width, turn.run); err != nil {
				return distribution{}, distribution{}, err
			}
		}
	}
	return f.summarize(), m.summarize(), nil
}

// samples collects the samples of one measurement.
type samples struct {
	mu        sync.Mutex
	durations []time.Duration
	// started holds when each of durations began, for the slowest's
	// times in the log: a tail is explained, or not, by what the
	// locker's, the API server's and the bench's logs say then.
	started  []time.Time
	timeouts int
}

// round takes samples first to first+width-1, all released at once.
func (s *samples) round(first, width int, sample sampler) error {
	var firstErr error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range width {
		wg.Go(func() {
			<-start
			d, ok, err := sample(first + k)
			ended := time.Now()
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case err != nil:
				firstErr = err
			case !ok:
				s.timeouts++
			default:
				s.durations = append(s.durations, d)
				s.started = append(s.started, ended.Add(-d))
			}
		})
	}
	close(start)
	wg.Wait()
	return firstErr
}

func (s *samples) summarize() distribution {
	// Before summarize, which sorts durations in place.
	slow := slowest(s.durations, s.started, slowestLogged)
	d := summarize(s.durations, s.timeouts)
	d.slowest = slow
	return d
}

// slowestLogged is how many of a measurement's slowest samples the bench
// logs with their times: the p99 of 200 samples is the third slowest, of
// 1,000 the eleventh.
const slowestLogged = 12

// timedSample is one sample and when it began.
type timedSample struct {
	at time.Time
	d  time.Duration
}

// slowest returns the n longest of durations, longest first, with when
// each began.
func slowest(durations []time.Duration, started []time.Time, n int) []timedSample {
	all := make([]timedSample, len(durations))
	for i := range durations {
		all[i] = timedSample{at: started[i], d: durations[i]}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].d > all[j].d })
	return all[:min(n, len(all))]
}

// logSlowest prints the slowest samples of d with when they began.
func (d distribution) logSlowest(what string) {
	var b strings.Builder
	for _, s := range d.slowest {
		fmt.Fprintf(&b, " %.1f ms at %s;", ms(s.d), s.at.UTC().Format("15:04:05.000"))
	}
	fmt.Fprintf(os.Stderr, "bench: the slowest %s:%s\n", what, b.String())
}

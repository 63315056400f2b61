package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// massDriftResult is a script changing a held field of many locked objects
// at once. The floor is the same number of PATCHes, to untracked
// ConfigMaps, sent by one client at the same concurrency: the least time
// the locker's reverts can take on this API server.
type massDriftResult struct {
	Objects     int     `json:"objects"`
	Concurrency int     `json:"concurrency"`
	FloorS      float64 `json:"floorSeconds"`
	// DriftS is how long the script took to send its PATCHes; RestoredS
	// from the moment the script's last PATCH was answered until the last
	// object was seen restored, and TotalS from its first PATCH.
	DriftS    float64 `json:"driftSeconds"`
	RestoredS float64 `json:"restoredAfterDriftSeconds"`
	TotalS    float64 `json:"totalSeconds"`
	Lost      int     `json:"lost"`
	// LockerCPUS is the locker's CPU from the first PATCH until the last
	// object was restored.
	LockerCPUS float64 `json:"lockerCPUSeconds"`
	// Events and StatusWrites are what the API server took of both in
	// the window, against Releases, the releases the drift touched.
	Releases     int     `json:"releases"`
	Events       float64 `json:"events"`
	StatusWrites float64 `json:"statusWrites"`
}

// massDrift edits n locked ConfigMaps at concurrency c and times them all
// restored; the floor is measured first, on untracked ConfigMaps. Each
// round writes values of its own, since a PATCH that changes nothing is
// not written.
func massDrift(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, l *locker, cw *configMapWatch, locked map[string][]ref, p params, n, c, round int, quiet func() error) (*massDriftResult, error) {
	var releases []string
	for name := range locked {
		releases = append(releases, name)
	}
	sort.Strings(releases)
	var targets []ref
	touched := map[string]bool{}
	for i := 0; len(targets) < n; i++ {
		name := releases[i%len(releases)]
		cms := locked[name]
		k := i / len(releases)
		if k >= len(cms) {
			if k > p.Objects {
				break
			}
			continue
		}
		targets = append(targets, cms[k])
		touched[name] = true
	}
	if len(targets) < n {
		return nil, nil
	}
	res := &massDriftResult{Objects: n, Concurrency: c, Releases: len(touched)}

	// The floor: n PATCHes to untracked ConfigMaps, at concurrency c.
	var floorRefs []ref
	for j := 0; len(floorRefs) < n && j < p.Untracked; j += 5 {
		floorRefs = append(floorRefs, ref{ns: fmt.Sprintf("noise-%d", j/untrackedPerNamespace), name: fmt.Sprintf("u%06d", j)})
	}
	if len(floorRefs) < n {
		return nil, fmt.Errorf("mass drift: %d untracked ConfigMaps for a floor of %d", len(floorRefs), n)
	}
	floorStart := time.Now()
	if _, err := patchAll(ctx, dyn, floorRefs, c, fmt.Sprintf("floor-%d", round)); err != nil {
		return nil, err
	}
	res.FloorS = time.Since(floorStart).Seconds()
	if err := quiet(); err != nil {
		return nil, err
	}

	before, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	if profiles != "" {
		go l.cpuProfile(ctx, filepath.Join(profiles, fmt.Sprintf("cpu-massdrift-N%d-M%d.pprof", p.Releases, p.Objects)), 20)
	}
	cpu0, err := l.cpu()
	if err != nil {
		return nil, err
	}
	restored := make([]<-chan time.Time, len(targets))
	start := time.Now()
	rvs, err := patchAll(ctx, dyn, targets, c, fmt.Sprintf("mass-drift-%d", round))
	if err != nil {
		return nil, err
	}
	end := time.Now()
	res.DriftS = end.Sub(start).Seconds()
	for i, r := range targets {
		restored[i] = cw.wait(r.ns+"/"+r.name, "declared", rvs[i])
	}
	deadline := time.After(5*time.Minute + 10*time.Duration(res.DriftS*float64(time.Second)))
	var last time.Time
	for _, ch := range restored {
		select {
		case t := <-ch:
			last = later(last, t)
		case <-deadline:
			res.Lost++
		}
	}
	res.RestoredS = max(0, last.Sub(end).Seconds())
	res.TotalS = last.Sub(start).Seconds()
	cpu1, err := l.cpu()
	if err != nil {
		return nil, err
	}
	res.LockerCPUS = (cpu1 - cpu0).Seconds()
	// Events and status counts follow within 2 s (bookkeepingDelay).
	time.Sleep(3 * time.Second)
	after, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	printServed("mass drift", before, after)
	for k, v := range after {
		d := v - before[k]
		switch {
		case d <= 0:
		case strings.Contains(k, `resource="events"`) && strings.Contains(k, `verb="POST"`):
			res.Events += d
		case strings.Contains(k, `resource="helmreleases"`) && strings.Contains(k, `subresource="status"`):
			res.StatusWrites += d
		}
	}
	fmt.Fprintf(os.Stderr, "bench: mass drift: %d objects of %d releases at %d at once: drift sent in %.2f s, last restored %.2f s after it (%.2f s in all), floor %.2f s; %d lost; %.0f events, %.0f status writes; the locker used %.2f s of CPU\n",
		n, res.Releases, c, res.DriftS, res.RestoredS, res.TotalS, res.FloorS, res.Lost, res.Events, res.StatusWrites, res.LockerCPUS)
	return res, nil
}

// patchAll sets data.key of every ref to value, c at a time, and returns
// the resourceVersion each write produced.
func patchAll(ctx context.Context, dyn dynamic.Interface, refs []ref, c int, value string) ([]int64, error) {
	rvs := make([]int64, len(refs))
	work := make(chan int)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for i := range work {
				_, _, rv, err := edit(ctx, dyn, refs[i], value)
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					continue
				}
				rvs[i] = rv
			}
		})
	}
	for i := range refs {
		work <- i
	}
	close(work)
	wg.Wait()
	return rvs, first
}

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// twoWayResult is the cost of two-way locking at a cold lock: the same
// releases' cold lock with the locker started with --default-rerender
// Off and Report, in turns on one control plane, and in Report mode the
// time until every release's first render was done.
type twoWayResult struct {
	Params params        `json:"params"`
	Off    []twoWayRound `json:"off"`
	Report []twoWayRound `json:"report"`
}

// twoWayRound is one cold lock of measureTwoWay.
type twoWayRound struct {
	ColdLockS   float64 `json:"coldLockSeconds"`
	ObjectsPerS float64 `json:"objectsLockedPerSecond"`
	// RendersDoneS is when the locker's helm_locker_renders_total first
	// added up to the number of releases, after process start as the
	// cold lock is, to within renderScrapeInterval; 0 if it never did.
	RendersDoneS float64 `json:"rendersDoneSeconds,omitempty"`
	// Renders are helm_locker_renders_total by result once renders were
	// done (or given up on), and RenderMeanMs the mean of the locker's
	// helm_locker_render_duration_seconds.
	Renders      map[string]float64 `json:"renders,omitempty"`
	RenderMeanMs float64            `json:"renderMeanMs,omitempty"`
	// HeapMiB is the live heap the cold lock reads once quiet, renders
	// done by then or not.
	HeapMiB float64 `json:"heapMiB"`
}

// renderScrapeInterval is how often the locker's /metrics is read for
// the time its renders are done, in both modes, so that each meets the
// same reads.
const renderScrapeInterval = 100 * time.Millisecond

// measureTwoWay measures the cold lock of p's releases, made TwoWay, with
// the locker started with --default-rerender Off and Report, rounds times
// each, on one control plane: Off first in odd rounds, Report first in
// even ones, so that neither always meets the API server as the other
// left it. Before each cold lock every CR loses its claim and status, so
// each is a first start, as measureColdLocks' are. Renders wait until
// the locks are in place, so Report's cold lock should be Off's.
func measureTwoWay(ctx context.Context, tools controlplane.Tools, lockerBinary string, p params, rounds int) (*twoWayResult, error) {
	p.TwoWay = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return nil, err
	}
	defer stop()
	locked, err := setup(ctx, env.kube, env.dyn, p)
	if err != nil {
		return nil, err
	}
	if err := settle(ctx, env.kube); err != nil {
		return nil, err
	}
	restored, err := watchConfigMaps(ctx, env.dyn, metav1.NamespaceAll, "app.kubernetes.io/managed-by=Helm")
	if err != nil {
		return nil, err
	}
	baseline, err := requestRate(ctx, env.kube, 30*time.Second)
	if err != nil {
		return nil, err
	}
	res := &twoWayResult{Params: p}
	for round := range rounds {
		modes := []string{"Off", "Report"}
		if round%2 == 1 {
			slices.Reverse(modes)
		}
		for _, mode := range modes {
			if err := unclaimAll(ctx, env.dyn); err != nil {
				return nil, err
			}
			if err := waitQuiet(ctx, env.kube, baseline); err != nil {
				return nil, err
			}
			r, err := twoWayColdLock(ctx, env, restored, locked, lockerBinary, p, baseline, mode)
			if err != nil {
				return nil, fmt.Errorf("two-way, %s: %w", mode, err)
			}
			fmt.Fprintf(os.Stderr, "bench: two-way round %d, %s: cold lock %.2f s (%.0f objects/s), renders done %.2f s, renders %v, mean render %.2f ms\n",
				round+1, mode, r.ColdLockS, r.ObjectsPerS, r.RendersDoneS, r.Renders, r.RenderMeanMs)
			if mode == "Off" {
				res.Off = append(res.Off, r)
			} else {
				res.Report = append(res.Report, r)
			}
		}
	}
	return res, nil
}

// twoWayColdLock is one cold lock with --default-rerender mode, the
// locker's /metrics read every renderScrapeInterval from its start until
// its renders are done: in Off mode, none are.
func twoWayColdLock(ctx context.Context, env *benchEnv, restored *configMapWatch, locked map[string][]ref, lockerBinary string, p params, baseline float64, mode string) (twoWayRound, error) {
	saved := lockerArgs
	lockerArgs = append(slices.Clip(saved), "--default-rerender="+mode)
	defer func() { lockerArgs = saved }()
	rec := &recording{interval: renderScrapeInterval}
	cold := &scenarioResult{Params: p}
	l, err := coldLock(ctx, env, restored, locked, lockerBinary, p, baseline, cold, rec, nil)
	if err != nil {
		return twoWayRound{}, err
	}
	defer l.stop()
	defer rec.stop()
	r := twoWayRound{ColdLockS: cold.ColdLockS, ObjectsPerS: cold.ObjectsPerS, HeapMiB: cold.HeapMiB}
	if mode == "Report" {
		// The cold lock's wait for quiet has usually seen them done.
		all := func(string) bool { return true }
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			n, err := l.sum(ctx, "helm_locker_renders_total", all)
			if err != nil {
				return r, err
			}
			if n >= float64(p.Releases) {
				break
			}
			time.Sleep(renderScrapeInterval)
		}
	}
	rec.stop()
	if len(rec.scrapes) == 0 {
		return r, fmt.Errorf("no scrape of the locker's /metrics")
	}
	for i, s := range rec.scrapes {
		var n float64
		for _, v := range rec.sumBy(i, "helm_locker_renders_total", "result") {
			n += v
		}
		if n >= float64(p.Releases) {
			r.RendersDoneS = s.at.Sub(rec.start).Seconds()
			break
		}
	}
	last := len(rec.scrapes) - 1
	r.Renders = rec.sumBy(last, "helm_locker_renders_total", "result")
	maps.DeleteFunc(r.Renders, func(_ string, v float64) bool { return v == 0 })
	series := rec.scrapes[last].series
	if n := series["helm_locker_render_duration_seconds_count"]; n > 0 {
		r.RenderMeanMs = series["helm_locker_render_duration_seconds_sum"] / n * 1000
	}
	return r, nil
}

// runTwoWay measures the two-way cold locks alone and prints them.
func runTwoWay(ctx context.Context, p params, lockerBinary string, rounds int) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	if lockerBinary, err = filepath.Abs(lockerBinary); err != nil {
		return err
	}
	res, err := measureTwoWay(ctx, tools, lockerBinary, p, rounds)
	if err != nil {
		return err
	}
	b := &strings.Builder{}
	twoWayMarkdown(b, res)
	fmt.Print(b.String())
	return nil
}

// ratio is Report's cold lock rate over Off's, of their medians, and the
// least and greatest of the rounds' own ratios, each round's Report
// against its Off.
func (t *twoWayResult) ratio() (median, least, greatest float64) {
	rates := func(rs []twoWayRound) []float64 {
		var out []float64
		for _, r := range rs {
			out = append(out, r.ObjectsPerS)
		}
		return out
	}
	off, report := rates(t.Off), rates(t.Report)
	median = medianOf(report) / medianOf(off)
	least, greatest = median, median
	for i := range min(len(off), len(report)) {
		q := report[i] / off[i]
		least, greatest = min(least, q), max(greatest, q)
	}
	return median, least, greatest
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// twoWayMarkdown writes the two-way section: each round, the ratio with
// its spread, and whether the noise of Off's own rounds hides it.
func twoWayMarkdown(b *strings.Builder, t *twoWayResult) {
	p := t.Params
	fmt.Fprintf(b, "## Two-way locking: the cold lock with Report on\n\n")
	fmt.Fprintf(b, "The base scenario's releases (N=%d × M=%d, B=%d), each storing a chart that renders its manifest as stored (a template per object, no lookups) and each CR naming a ServiceAccount of its release namespace, bound to the ClusterRole edit, as its write identity: the lock writes as it, and Report renders as it. One control plane; the locker started with `--default-rerender=Off` and `=Report` in turns (%d rounds, Off first in odd rounds), every CR unclaimed before each start, as a first start finds it. Times are from process start; the locker's /metrics is read every %v in both modes. A render is done when `helm_locker_renders_total`, summed, reaches the release count. This setup's Off is not the base scenario's cold lock above: its releases store their charts, and its writes are impersonated.\n\n",
		p.Releases, p.Objects, p.Untracked, max(len(t.Off), len(t.Report)), renderScrapeInterval)
	fmt.Fprintf(b, "| round | Off: cold lock s | objects/s | Report: cold lock s | objects/s | Report / Off | every first render done, s | renders by result | mean render ms | live heap MiB, Off / Report |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range max(len(t.Off), len(t.Report)) {
		var off, rep twoWayRound
		if i < len(t.Off) {
			off = t.Off[i]
		}
		if i < len(t.Report) {
			rep = t.Report[i]
		}
		done := "never"
		if rep.RendersDoneS > 0 {
			done = fmt.Sprintf("%.2f", rep.RendersDoneS)
		}
		var renders []string
		for _, k := range slices.Sorted(maps.Keys(rep.Renders)) {
			renders = append(renders, fmt.Sprintf("%s %.0f", k, rep.Renders[k]))
		}
		if len(off.Renders) > 0 {
			renders = append(renders, fmt.Sprintf("(Off rendered: %v)", off.Renders))
		}
		fmt.Fprintf(b, "| %d | %.2f | %.0f | %.2f | %.0f | %.2f× | %s | %s | %.2f | %.1f / %.1f |\n",
			i+1, off.ColdLockS, off.ObjectsPerS, rep.ColdLockS, rep.ObjectsPerS, rep.ObjectsPerS/off.ObjectsPerS, done, strings.Join(renders, ", "), rep.RenderMeanMs, off.HeapMiB, rep.HeapMiB)
	}
	median, least, greatest := t.ratio()
	spread := func(rs []twoWayRound) (lo, hi float64) {
		lo, hi = rs[0].ObjectsPerS, rs[0].ObjectsPerS
		for _, r := range rs {
			lo, hi = min(lo, r.ObjectsPerS), max(hi, r.ObjectsPerS)
		}
		return lo, hi
	}
	offLo, offHi := spread(t.Off)
	repLo, repHi := spread(t.Report)
	fmt.Fprintf(b, "\n| figure | value | target |\n|---|---|---|\n")
	fmt.Fprintf(b, "| cold lock, Report / Off, of the medians | **%.2f×** (rounds %.2f× to %.2f×) | ≥ 0.90× |\n", median, least, greatest)
	fmt.Fprintf(b, "| Off's rounds | %.0f to %.0f objects/s (%.0f%% apart) | |\n| Report's rounds | %.0f to %.0f objects/s (%.0f%% apart) | |\n",
		offLo, offHi, (offHi/offLo-1)*100, repLo, repHi, (repHi/repLo-1)*100)
	heap := func(rs []twoWayRound) float64 {
		var hs []float64
		for _, r := range rs {
			hs = append(hs, r.HeapMiB)
		}
		return medianOf(hs)
	}
	fmt.Fprintf(b, "| live heap once quiet, Report less Off, of the medians, per release | %.0f bytes | |\n", (heap(t.Report)-heap(t.Off))*(1<<20)/float64(p.Releases))
	slower := 0
	for i := range min(len(t.Off), len(t.Report)) {
		if t.Report[i].ObjectsPerS < t.Off[i].ObjectsPerS {
			slower++
		}
	}
	fmt.Fprintf(b, "\nIn %d of %d rounds Report's cold lock was slower than the Off beside it.", slower, min(len(t.Off), len(t.Report)))
	if gap := (offHi/offLo - 1); gap > abs(1-median) {
		fmt.Fprintf(b, " Off's own rounds lie %.0f%% apart, more than the %.0f%% between the medians: at %d rounds the spread of the rounds alone does not resolve a difference of that size.", gap*100, abs(1-median)*100, len(t.Off))
	}
	b.WriteString("\n\n")
}

func abs(x float64) float64 { return max(x, -x) }

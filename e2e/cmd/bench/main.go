// Command bench measures helm-locker against a real control plane: cold
// lock time, revert latency against the physical floor, memory per locked
// and untracked object, and idle API load. `make bench` runs it and writes
// docs/benchmarks.{json,md}, docs/revert-latency.png and
// docs/dashboard-panels.png (see dashboard.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"

	"github.com/helm-locker/helm-locker/api"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// params describe one scenario.
type params struct {
	Releases  int `json:"releases"`
	Objects   int `json:"objectsPerRelease"`
	Untracked int `json:"untrackedObjects"`
	// TwoWay releases store a chart that renders their manifest as
	// stored, and their CRs name a write identity, as two-way locking
	// needs to render them (see measureTwoWay).
	TwoWay bool `json:"twoWay,omitempty"`
}

// scaled is p with dimension N, M or B multiplied by factor.
func (p params) scaled(dim string, factor int) params {
	switch dim {
	case "N":
		p.Releases *= factor
	case "M":
		p.Objects *= factor
	case "B":
		p.Untracked *= factor
	}
	return p
}

// growthFactors are the multiples of a dimension the growth table runs.
// Untracked objects cost so little each (tens of bytes) that the slope
// needs a wide range to stand out of a run's noise: up to 16x.
func growthFactors(dim string) []int {
	if dim == "B" {
		return []int{2, 4, 8, 16}
	}
	return []int{2, 4}
}

func (p params) namespaces() int { return max(1, p.Releases/10) }

// profiles is the folder heap profiles are kept in; empty keeps none.
var profiles string

// lockerArgs are flags every locker the bench starts is given besides
// its own.
var lockerArgs []string

// statusRate is the rate the status churn measurement aims at.
var statusRate float64

// massDriftObjects is how many locked objects the mass drift changes at
// once; a scenario with fewer locked ConfigMaps skips it.
const massDriftObjects = 5000

// seriesRelease is how many objects each release of the scale series has.
const seriesRelease = 50

// seriesCounts parses -series.
func seriesCounts(s string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < seriesRelease {
			return nil, fmt.Errorf("-series %q: want counts of locked objects, each at least %d", s, seriesRelease)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// seriesParams is the series' row of n locked objects: releases of
// seriesRelease objects, beside n untracked.
func seriesParams(n int) params {
	return params{Releases: n / seriesRelease, Objects: seriesRelease, Untracked: n}
}

// runSeries runs one scenario per count of locked objects, with as many
// untracked, each measured in full, and adds the rows to the report in out:
// run's, when it ran first, or with alone an older one, which then says
// when the series was measured.
func runSeries(ctx context.Context, counts []int, full *fullMeasure, out, lockerBinary string, alone bool) error {
	tools, lockerBinary, rep, err := addingTo(ctx, out, lockerBinary)
	if err != nil {
		return fmt.Errorf("the scale series adds to a report: %w", err)
	}
	rep.Series, rep.SeriesDate, rep.SeriesLocker, rep.SeriesNote, rep.SeriesWhy = nil, "", "", "", nil
	if alone {
		rep.SeriesDate = time.Now().UTC().Format(time.RFC3339)
		rep.SeriesLocker = lockerVersion(ctx, lockerBinary)
	}
	for _, n := range counts {
		p := seriesParams(n)
		fmt.Fprintf(os.Stderr, "bench: series %+v\n", p)
		res, err := scenario(ctx, tools, lockerBinary, p, full, true)
		if err != nil {
			return err
		}
		res.Floor.Samples, res.Single.Samples, res.ConcurrentFloor.Samples, res.Concurrent.Samples, res.BackToBack.Samples = nil, nil, nil, nil, nil
		rep.Series = append(rep.Series, res)
		// Each row is written as it ends: the largest takes longest.
		if err := write(out, rep); err != nil {
			return err
		}
	}
	return nil
}

// addingTo finds the tools, lockerBinary's absolute path, and the report
// already in out that a measurement adds to.
func addingTo(ctx context.Context, out, lockerBinary string) (controlplane.Tools, string, *report, error) {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return tools, "", nil, err
	}
	if lockerBinary, err = filepath.Abs(lockerBinary); err != nil {
		return tools, "", nil, err
	}
	data, err := os.ReadFile(filepath.Join(out, "benchmarks.json"))
	if err != nil {
		return tools, "", nil, err
	}
	rep := &report{}
	if err := json.Unmarshal(data, rep); err != nil {
		return tools, "", nil, err
	}
	return tools, lockerBinary, rep, nil
}

// runSmall measures the small scenario (smallParams) into the report in
// out, which then says when and on which binary.
func runSmall(ctx context.Context, out, lockerBinary string) error {
	tools, lockerBinary, rep, err := addingTo(ctx, out, lockerBinary)
	if err != nil {
		return fmt.Errorf("the small scenario adds to a report: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench: small scenario %+v\n", smallParams)
	if rep.Small, err = scenario(ctx, tools, lockerBinary, smallParams, nil, false); err != nil {
		return err
	}
	rep.SmallDate, rep.SmallLocker = time.Now().UTC().Format(time.RFC3339), lockerVersion(ctx, lockerBinary)
	return write(out, rep)
}

func main() {
	var (
		base         params
		out          string
		edits        int
		seriesEdits  int
		concurrency  int
		idle         time.Duration
		scale        bool
		lockerBinary string
		churnDuring  bool
	)
	flag.IntVar(&base.Releases, "releases", 200, "N: releases")
	flag.IntVar(&base.Objects, "objects", 25, "M: objects per release")
	flag.IntVar(&base.Untracked, "untracked", 20000, "B: objects no release tracks")
	flag.IntVar(&edits, "edits", 200, "single edits measured, and edits in the concurrent rounds and the bursts")
	flag.IntVar(&seriesEdits, "series-edits", 1000, "single edits measured in each row of the scale series: at 100,000 objects stalls of a few seconds, the API server's garbage collections among them, came about twice a minute, and the p99 of 200 edits (some five seconds) depended on whether one fell in them")
	flag.IntVar(&concurrency, "concurrency", 50, "edits sent at once in the concurrent measurement")
	flag.DurationVar(&idle, "idle", time.Minute, "length of each idle window")
	flag.BoolVar(&scale, "scale", true, "also run the growth table: 2x and 4x of N and M, and 2x to 16x of B")
	flag.StringVar(&out, "out", "docs", "folder for benchmarks.json, benchmarks.md, revert-latency.png and dashboard-panels.png")
	flag.StringVar(&lockerBinary, "locker", "bin/helm-locker", "helm-locker binary to measure")
	flag.StringVar(&profiles, "profiles", "", "keep a heap profile of the locker in this folder for every scenario, read when its memory is, its CPU profiles, the log of every locker it started, and the control plane's logs")
	flag.Float64Var(&statusRate, "status-rate", 1000, "status writes a second to locked Deployments in the status churn measurement")
	flag.BoolVar(&churnDuring, "churn-during", true, "touch every Deployment, Service and Secret about once a minute all through the latency measurement")
	massDriftOnly := flag.Int("mass-drift-only", 0, "measure the base scenario's cold lock (with -series of one count, that row's) and then only this many rounds of the mass drift, print them and write no report: for mass-drift work")
	coldLockRounds := flag.Int("cold-lock-rounds", 0, "measure only the base scenario's cold lock, this many times on one control plane, with -locker and each binary of -compare in turns: for cold-lock work")
	compare := flag.String("compare", "", "comma-separated helm-locker binaries whose cold lock -cold-lock-rounds measures in turns with -locker's")
	startOnly := flag.Bool("start-only", false, "measure the base scenario's two cold locks alone, CRs created at once after the locker is ready and CRs that exist before it starts, and print them with the requests at start by verb and resource; write no report: for start work")
	memoryOnly := flag.Bool("memory-only", false, "measure the base scenario's cold lock and memory alone, print them and write no report: for memory work, with -profiles")
	render := flag.String("render", "", "measure nothing: write the report in this benchmarks.json again, with the per-object figures derived anew")
	admission := flag.Bool("admission", true, "also measure Prevent mode's admission against a no-op webhook, into admission.md and admission.json")
	admissionOnly := flag.Bool("admission-only", false, "measure admission alone")
	series := flag.String("series", "", "also run the scale series: comma-separated counts of locked objects, each with as many untracked, in releases of 50 objects (make bench: 25000,50000,100000)")
	smallOnly := flag.Bool("small-only", false, "measure the small scenario alone (1,000 locked objects: the locker's base), and add it to the report already in -out")
	seriesOnly := flag.Bool("series-only", false, "run the scale series alone, and add it to the report already in -out")
	watchFloor := flag.String("watch-floor", "", "be the bare watcher the churn measurements start, against this kubeconfig, and do nothing else")
	twoWayRounds := flag.Int("two-way-rounds", 5, "cold locks of the base scenario's releases with --default-rerender Off and Report, each this many times in turns on a control plane of their own, with charts to render and write identities (0: none)")
	sources := flag.Bool("sources", true, "also measure a ManifestLock from a source: a 1,000-object Kustomize overlay's new revisions held, and the locker's memory while it builds, into sources.md and sources.json")
	sourcesOnly := flag.Bool("sources-only", false, "measure a ManifestLock from a source alone")
	twoWayOnly := flag.Bool("two-way-only", false, "measure only the two-way cold locks (-two-way-rounds of each mode), print them and write no report: for two-way locking work")
	flag.Parse()
	if *watchFloor != "" {
		if err := runWatchFloor(*watchFloor); err != nil {
			fmt.Fprintln(os.Stderr, "bench: watch floor:", err)
			os.Exit(1)
		}
		return
	}
	if *render != "" {
		if err := rerender(*render, out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *sourcesOnly {
		if err := runSources(ctx, out, lockerBinary, 1000, 3); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *admissionOnly {
		if err := runAdmission(ctx, out, lockerBinary); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *coldLockRounds > 0 {
		binaries := []string{lockerBinary}
		if *compare != "" {
			binaries = append(binaries, strings.Split(*compare, ",")...)
		}
		if err := measureColdLocks(ctx, base, binaries, *coldLockRounds); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *twoWayOnly {
		if err := runTwoWay(ctx, base, lockerBinary, max(1, *twoWayRounds)); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *memoryOnly || *startOnly {
		if err := measureMemory(ctx, base, lockerBinary, *startOnly); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	counts, err := seriesCounts(*series)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *massDriftOnly > 0 {
		p := base
		switch len(counts) {
		case 0:
		case 1:
			p = seriesParams(counts[0])
		default:
			fmt.Fprintln(os.Stderr, "bench: -mass-drift-only takes one -series count at most")
			os.Exit(2)
		}
		if err := measureMassDrift(ctx, p, &fullMeasure{concurrency: concurrency, idle: idle, massDriftRounds: *massDriftOnly}, lockerBinary); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *smallOnly {
		if err := runSmall(ctx, out, lockerBinary); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *seriesOnly {
		if err := runSeries(ctx, counts, &fullMeasure{edits: edits, singleEdits: seriesEdits, concurrency: concurrency, idle: idle}, out, lockerBinary, true); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, base, &fullMeasure{edits: edits, concurrency: concurrency, idle: idle, churnDuring: churnDuring, twoWayRounds: *twoWayRounds, dashboard: true}, scale, out, lockerBinary); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if len(counts) > 0 {
		if err := runSeries(ctx, counts, &fullMeasure{edits: edits, singleEdits: seriesEdits, concurrency: concurrency, idle: idle}, out, lockerBinary, false); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *admission {
		if err := runAdmission(ctx, out, lockerBinary); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *sources {
		if err := runSources(ctx, out, lockerBinary, 1000, 3); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

// measureMemory runs p's cold lock, after the burst's with burst, and
// prints their figures.
func measureMemory(ctx context.Context, p params, lockerBinary string, burst bool) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	if lockerBinary, err = filepath.Abs(lockerBinary); err != nil {
		return err
	}
	res, err := scenario(ctx, tools, lockerBinary, p, nil, burst)
	if err != nil {
		return err
	}
	fmt.Printf("N=%d M=%d B=%d: cold lock %.2f s (%.0f objects/s), RSS %.1f MiB, live heap %.1f MiB\n  %s\n",
		p.Releases, p.Objects, p.Untracked, res.ColdLockS, res.ObjectsPerS, res.RSSMiB, res.HeapMiB, res.memory)
	if u := res.Burst; u != nil {
		fmt.Printf("CRs created at once after the locker was ready: cold lock %.2f s (%.0f objects/s)\n", u.ColdLockS, u.ObjectsPerS)
	}
	b := &strings.Builder{}
	startRequestsTable(b, res)
	fmt.Print(b.String())
	return nil
}

// measureMassDrift runs the mass drift alone, full.massDriftRounds times
// on one control plane, so that a change to it can be measured against
// the noise in a few minutes.
func measureMassDrift(ctx context.Context, p params, full *fullMeasure, lockerBinary string) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	if lockerBinary, err = filepath.Abs(lockerBinary); err != nil {
		return err
	}
	_, err = scenario(ctx, tools, lockerBinary, p, full, false)
	return err
}

// report is everything one `make bench` measures.
type report struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	// Note is what the page must say of the run that its figures do
	// not: written by hand into the JSON after the run, as SeriesNote
	// is, and cleared by the next make bench.
	Note string          `json:"note,omitempty"`
	Base *scenarioResult `json:"base"`
	// Small is the locker's base memory: the cold lock and memory of
	// smallParams, on a control plane of its own.
	Small *scenarioResult `json:"small,omitempty"`
	// SmallDate and SmallLocker say when, and on which binary, -small-only
	// measured Small again into an older report; empty when it was
	// measured with the rest.
	SmallDate   string      `json:"smallDate,omitempty"`
	SmallLocker string      `json:"smallLocker,omitempty"`
	Growth      []growthRow `json:"growth,omitempty"`
	// Series is the scale series: one replica from 25,000 to 100,000
	// locked objects (see runSeries), measured at SeriesDate: -series-only
	// measures it again into an older report.
	Series     []*scenarioResult `json:"series,omitempty"`
	SeriesDate string            `json:"seriesDate,omitempty"`
	// Locker and SeriesLocker are what the measured binary's version
	// command printed, so a row names the commit it measured.
	Locker       string `json:"locker,omitempty"`
	SeriesLocker string `json:"seriesLocker,omitempty"`
	// SeriesNote is what the page must say of how the series was
	// measured that the figures do not: written by hand into the JSON,
	// and cleared when the series is measured again.
	SeriesNote string `json:"seriesNote,omitempty"`
	// SeriesWhy is what a reading of the run found of why a target
	// missed, by the target's name on the page: written by hand as
	// SeriesNote is, after the figures' own reason.
	SeriesWhy map[string]string `json:"seriesWhy,omitempty"`
	// TwoWay is the base scenario's cold lock with two-way locking's
	// Report mode on and off.
	TwoWay   *twoWayResult  `json:"twoWay,omitempty"`
	Derived  derived        `json:"derived"`
	Settings map[string]any `json:"settings"`
}

// smallParams is a small cluster's lock, 1,000 objects in 40 releases of
// 25 with as many untracked: what the locker holds there is mostly its
// base, which every replica and every shard pays.
var smallParams = params{Releases: 40, Objects: 25, Untracked: 1000}

// smallRSSTarget is the most RSS, in MiB, the locker may keep when quiet
// at smallParams, its own file-backed pages included.
const smallRSSTarget = 48

type growthRow struct {
	Dimension string  `json:"dimension"`
	Factor    int     `json:"factor"`
	Params    params  `json:"params"`
	RSSMiB    float64 `json:"rssMiB"`
	HeapMiB   float64 `json:"heapMiB"`
	ColdLockS float64 `json:"coldLockSeconds"`
}

type derived struct {
	// BytesPerLockedObject is the larger of the slopes over M (more
	// objects per release) and over N (more releases, each with its CR,
	// release Secret and lock state), which the targets are held to.
	BytesPerLockedObject    float64 `json:"bytesPerLockedObject"`
	BytesPerLockedObjectByM float64 `json:"bytesPerLockedObjectByM"`
	BytesPerLockedObjectByN float64 `json:"bytesPerLockedObjectByN"`
	BytesPerUntrackedObject float64 `json:"bytesPerUntrackedObject"`
	// The RSS slopes' 95% intervals, as plus or minus bytes: three rows
	// of a few MiB each cannot tell 800 bytes an object from nothing
	// when one row's RSS is 15 MiB off, and the targets must not say
	// met or missed of what the run could not see. 0 where there are
	// too few rows to tell.
	BytesPerLockedObject95    float64 `json:"bytesPerLockedObject95,omitempty"`
	BytesPerLockedObjectByM95 float64 `json:"bytesPerLockedObjectByM95,omitempty"`
	BytesPerLockedObjectByN95 float64 `json:"bytesPerLockedObjectByN95,omitempty"`
	BytesPerUntrackedObject95 float64 `json:"bytesPerUntrackedObject95,omitempty"`
	HeapPerLockedObject       float64 `json:"heapBytesPerLockedObject"`
	HeapPerLockedObjectByN    float64 `json:"heapBytesPerLockedObjectByN"`
	HeapPerUntrackedObject    float64 `json:"heapBytesPerUntrackedObject"`
	SingleP50xFloor           float64 `json:"singleP50OverFloor"`
	SingleP99xFloor           float64 `json:"singleP99OverFloor"`
	ConcurrentP50xFloor       float64 `json:"concurrentP50OverFloor"`
	ConcurrentP99xFloor       float64 `json:"concurrentP99OverFloor"`
}

func run(ctx context.Context, base params, full *fullMeasure, scale bool, out, lockerBinary string) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	lockerBinary, err = filepath.Abs(lockerBinary)
	if err != nil {
		return err
	}
	rep := &report{
		Date:     time.Now().UTC().Format(time.RFC3339),
		Machine:  machine(),
		Locker:   lockerVersion(ctx, lockerBinary),
		Settings: map[string]any{"edits": full.edits, "concurrency": full.concurrency, "idleWindow": full.idle.String(), "churnDuringLatency": full.churnDuring},
	}
	fmt.Fprintf(os.Stderr, "bench: base scenario %+v\n", base)
	rep.Base, err = scenario(ctx, tools, lockerBinary, base, full, true)
	if err != nil {
		return err
	}
	f := rep.Base.Floor.P50
	rep.Derived.SingleP50xFloor = rep.Base.Single.P50 / f
	rep.Derived.SingleP99xFloor = rep.Base.Single.P99 / rep.Base.Floor.P99
	rep.Derived.ConcurrentP50xFloor = rep.Base.Concurrent.P50 / rep.Base.ConcurrentFloor.P50
	rep.Derived.ConcurrentP99xFloor = rep.Base.Concurrent.P99 / rep.Base.ConcurrentFloor.P99
	fmt.Fprintf(os.Stderr, "bench: small scenario %+v\n", smallParams)
	if rep.Small, err = scenario(ctx, tools, lockerBinary, smallParams, nil, false); err != nil {
		return err
	}
	if full.twoWayRounds > 0 {
		fmt.Fprintf(os.Stderr, "bench: two-way %+v\n", base)
		if rep.TwoWay, err = measureTwoWay(ctx, tools, lockerBinary, base, full.twoWayRounds); err != nil {
			return err
		}
	}
	if scale {
		rep.Growth = append(rep.Growth, growthRow{Dimension: "base", Factor: 1, Params: base, RSSMiB: rep.Base.RSSMiB, HeapMiB: rep.Base.HeapMiB, ColdLockS: rep.Base.ColdLockS})
		for _, dim := range []string{"N", "M"} {
			for _, factor := range growthFactors(dim) {
				p := base.scaled(dim, factor)
				fmt.Fprintf(os.Stderr, "bench: growth %s x%d %+v\n", dim, factor, p)
				res, err := scenario(ctx, tools, lockerBinary, p, nil, false)
				if err != nil {
					return err
				}
				rep.Growth = append(rep.Growth, growthRow{Dimension: dim, Factor: factor, Params: p, RSSMiB: res.RSSMiB, HeapMiB: res.HeapMiB, ColdLockS: res.ColdLockS})
			}
		}
		rows, err := untrackedGrowth(ctx, tools, lockerBinary, base, growthFactors("B"))
		if err != nil {
			return err
		}
		rep.Growth = append(rep.Growth, rows...)
		rep.Derived = derive(rep)
	}
	return write(out, rep)
}

// derive works out the figures per object from the growth rows: the
// least-squares slope of memory over the runs of M and of N (locked
// objects) and of B (untracked objects). One difference of two runs, as
// 2x - 1x, is at the mercy of one run's noise; a few hundred KiB of it
// make a figure per untracked object negative.
func derive(rep *report) derived {
	d := rep.Derived
	var locked, lockedN, untracked [][3]float64 // objects, RSS bytes, heap bytes
	for _, g := range rep.Growth {
		point := func(objects int) [3]float64 {
			return [3]float64{float64(objects), g.RSSMiB * (1 << 20), g.HeapMiB * (1 << 20)}
		}
		if g.Dimension == "base" || g.Dimension == "M" {
			locked = append(locked, point(g.Params.Releases*g.Params.Objects))
		}
		if g.Dimension == "base" || g.Dimension == "N" {
			lockedN = append(lockedN, point(g.Params.Releases*g.Params.Objects))
		}
		if g.Dimension == "base" || g.Dimension == "B" {
			untracked = append(untracked, point(g.Params.Untracked))
		}
	}
	if len(locked) < 2 || len(untracked) < 2 {
		return d
	}
	d.BytesPerLockedObjectByM, d.BytesPerLockedObjectByM95 = slope(locked, 1)
	d.HeapPerLockedObject, _ = slope(locked, 2)
	d.BytesPerLockedObject, d.BytesPerLockedObject95 = d.BytesPerLockedObjectByM, d.BytesPerLockedObjectByM95
	if len(lockedN) >= 2 {
		d.BytesPerLockedObjectByN, d.BytesPerLockedObjectByN95 = slope(lockedN, 1)
		d.HeapPerLockedObjectByN, _ = slope(lockedN, 2)
		if d.BytesPerLockedObjectByN > d.BytesPerLockedObject {
			d.BytesPerLockedObject, d.BytesPerLockedObject95 = d.BytesPerLockedObjectByN, d.BytesPerLockedObjectByN95
		}
	}
	d.BytesPerUntrackedObject, d.BytesPerUntrackedObject95 = slope(untracked, 1)
	d.HeapPerUntrackedObject, _ = slope(untracked, 2)
	return d
}

// slope is the least-squares slope of column y over column 0, and the
// half width of its 95% interval (Student's t over the residuals), 0 for
// two points, which a line always fits.
func slope(points [][3]float64, y int) (float64, float64) {
	var mx, my float64
	for _, p := range points {
		mx += p[0]
		my += p[y]
	}
	n := float64(len(points))
	mx /= n
	my /= n
	var sxy, sxx float64
	for _, p := range points {
		sxy += (p[0] - mx) * (p[y] - my)
		sxx += (p[0] - mx) * (p[0] - mx)
	}
	b := sxy / sxx
	df := len(points) - 2
	if df < 1 {
		return b, 0
	}
	var residuals float64
	for _, p := range points {
		r := p[y] - my - b*(p[0]-mx)
		residuals += r * r
	}
	return b, t95(df) * math.Sqrt(residuals/float64(df)/sxx)
}

// t95 is the two-sided 95% quantile of Student's t with df degrees of
// freedom; past the table, the last row's, which is wider than theirs.
func t95(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}
	return table[min(df, len(table))-1]
}

// lockerVersion is what the binary's version command prints: its version
// and commit. A binary that cannot say is named so rather than stopping
// the bench.
func lockerVersion(ctx context.Context, binary string) string {
	out, err := exec.CommandContext(ctx, binary, "version").Output()
	if err != nil {
		return fmt.Sprintf("%s (version unknown: %v)", filepath.Base(binary), err)
	}
	return strings.TrimSpace(string(out))
}

// rerender writes the report in file again, with the figures derived anew.
func rerender(file, out string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	rep := &report{}
	if err := json.Unmarshal(data, rep); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if rep.Base == nil {
		return fmt.Errorf("%s: no base scenario", file)
	}
	rep.Derived = derive(rep)
	return write(out, rep)
}

func machine() string {
	data, _ := exec.Command("uname", "-srm").Output()
	return fmt.Sprintf("%s, %d CPUs", string(data[:max(0, len(data)-1)]), numCPU())
}

// scenarioResult is what one control plane, set up once, measured.
type scenarioResult struct {
	Params      params  `json:"params"`
	SetupS      float64 `json:"setupSeconds"`
	DeployedS   float64 `json:"allDeployedSeconds"`
	RestoredS   float64 `json:"allDriftRestoredSeconds"`
	ColdLockS   float64 `json:"coldLockSeconds"`
	ObjectsPerS float64 `json:"objectsLockedPerSecond"`
	// StartRequests counts the locker's requests from its start until its
	// cold lock has gone quiet, by method: lists and watches, the Lease,
	// status writes and events, and whatever else the start costs.
	StartRequests         float64            `json:"startRequests"`
	StartRequestsByMethod map[string]float64 `json:"startRequestsByMethod,omitempty"`
	// StartRequestsByResource are the same by verb and resource, from the
	// API server's audit log, and StartLockedGets the GETs among them of
	// locked objects, which the informers' lists should have answered.
	StartRequestsByResource map[string]float64 `json:"startRequestsByResource,omitempty"`
	StartLockedGets         float64            `json:"startLockedGets"`
	// Burst is the cold lock of the same releases with the locker up
	// before their CRs, which are created at once (the base scenario and
	// the series).
	Burst *scenarioResult `json:"burst,omitempty"`
	// FloorS is the floor of the cold lock (see listWatchFloor), measured
	// right before the locker started, over FloorObjects objects.
	FloorS       float64 `json:"floorSeconds,omitempty"`
	FloorObjects int     `json:"floorObjects,omitempty"`
	// ColdLockCPUS is the locker's CPU from its start to the end of the
	// cold lock.
	ColdLockCPUS float64 `json:"coldLockCPUSeconds,omitempty"`
	RSSMiB       float64 `json:"rssMiB"`
	// RSSAnonMiB and RSSFileMiB split RSSMiB into anonymous pages (the
	// heap, stacks, the runtime) and file-backed ones (the binary's).
	RSSAnonMiB float64 `json:"rssAnonMiB,omitempty"`
	RSSFileMiB float64 `json:"rssFileMiB,omitempty"`
	HeapMiB    float64 `json:"heapMiB"`
	// IdleAfterS is how long after the API server went quiet the locker
	// was idle (see waitLockerIdle; -1: never), when RSSMiB was read.
	// RSSScrapedMiB is its RSS five seconds after the bench then read its
	// /metrics.
	IdleAfterS    float64 `json:"idleAfterSeconds,omitempty"`
	RSSScrapedMiB float64 `json:"rssScrapedMiB,omitempty"`
	// memory says where the resident set went when it was read, for
	// -memory-only.
	memory          string
	Floor           distribution       `json:"floor"`
	Single          distribution       `json:"single"`
	ConcurrentFloor distribution       `json:"concurrentFloor"`
	Concurrent      distribution       `json:"concurrent"`
	BackToBack      distribution       `json:"backToBack"`
	Churn           *churnResult       `json:"churn,omitempty"`
	ChurnDuring     *churnDuring       `json:"churnDuringLatency,omitempty"`
	StatusChurn     *statusChurnResult `json:"statusChurn,omitempty"`
	LabelChurn      *statusChurnResult `json:"labelChurn,omitempty"`
	// ControllerChurn is the Deployment controller's own status writes.
	ControllerChurn *controllerChurnResult `json:"controllerChurn,omitempty"`
	MassDrift       *massDriftResult       `json:"massDrift,omitempty"`
	Idle            *idleResult            `json:"idle,omitempty"`
	// TermsLost counts the leader terms the locker lost while measured
	// (see locker.termsLost); nil where it was not counted.
	TermsLost *int `json:"leaderTermsLost,omitempty"`
	// dashboard holds the scrapes of the locker's /metrics, from its start
	// to the end of the latency measurement, that docs/dashboard.md's
	// pictures are drawn from; nil when latency is not measured.
	dashboard *recording
}

// churnResult is what the locker did when another field manager touched
// every locked object once: nothing, if it tells others' changes from
// drift.
type churnResult struct {
	Touched      int     `json:"objectsTouched"`
	LockerWrites float64 `json:"lockerWrites"`
	Drifts       int64   `json:"driftsDetected"`
}

type idleResult struct {
	BaselineRequestsPerMin float64 `json:"apiServerBaselineRequestsPerMinute"`
	WithLockerPerMin       float64 `json:"apiServerRequestsPerMinuteWithLocker"`
	LockerRequestsPerMin   float64 `json:"lockerRequestsPerMinute"`
	// LockerLeaseRequestsPerMin are the locker's Lease requests: leader
	// election renewals.
	LockerLeaseRequestsPerMin float64 `json:"lockerLeaseRequestsPerMinute"`
	// LockerRequestsByMethod are the locker's requests a minute by HTTP
	// method: a watch reopened is a GET.
	LockerRequestsByMethod map[string]float64 `json:"lockerRequestsPerMinuteByMethod,omitempty"`
	LockerCPUSecondsPerMin float64            `json:"lockerCpuSecondsPerMinute"`
}

// fullMeasure asks a scenario for latency and idle figures too.
type fullMeasure struct {
	edits, concurrency int
	// singleEdits, if set, is how many single edits are measured, in
	// place of edits; the concurrent rounds and the bursts stay edits'.
	singleEdits int
	idle        time.Duration
	churnDuring bool
	// massDriftRounds, if set, is how many times the mass drift is
	// measured, and nothing else is.
	massDriftRounds int
	// twoWayRounds is how many cold locks of each mode measureTwoWay
	// takes, after the base scenario; 0 skips it.
	twoWayRounds int
	// dashboard records the locker's /metrics every scrapeInterval for
	// docs/dashboard.md. Only the base scenario's is drawn: at 2,000
	// held releases a scrape costs the locker about 0.2 s of CPU and
	// 59 MB of garbage (internal/metrics BenchmarkScrape), which a
	// series row would count in its cold lock and its memory.
	dashboard bool
}

// benchEnv is one scenario's control plane and clients.
type benchEnv struct {
	dir  string
	cp   *controlplane.ControlPlane
	kube kubernetes.Interface
	dyn  dynamic.Interface
	// lockerKubeconfig is the locker's: its own ServiceAccount's, whose
	// requests alone the API server's audit log records.
	lockerKubeconfig string
}

// controlPlaneLogs are the control plane's logs that -profiles keeps: a
// slow sample is read against what etcd and the API server did then
// (their garbage collections too, with GODEBUG=gctrace=1).
var controlPlaneLogs = []string{"etcd.log", "kube-apiserver.log", "kube-controller-manager.log"}

// keepControlPlaneLogs copies the control plane's logs in dir to -profiles,
// named by the time they were kept, before dir is removed.
func keepControlPlaneLogs(dir string) {
	if profiles == "" {
		return
	}
	stamp := time.Now().UTC().Format("150405")
	for _, name := range controlPlaneLogs {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			_ = os.WriteFile(filepath.Join(profiles, strings.TrimSuffix(name, ".log")+"-"+stamp+".log"), data, 0o644)
		}
	}
}

// startEnv starts a control plane with the HelmRelease CRD installed. stop
// ends the watches of ctx's scenario first, so they do not retry a
// stopped server, then the control plane.
func startEnv(ctx context.Context, cancel context.CancelFunc, tools controlplane.Tools) (env *benchEnv, stop func(), err error) {
	dir, err := os.MkdirTemp("", "helm-locker-bench-")
	if err != nil {
		return nil, nil, err
	}
	audit, err := auditArgs(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cp, err := controlplane.StartWithOptions(ctx, tools, dir, controlplane.Options{APIServerArgs: audit})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop = func() {
		cancel()
		_ = cp.Stop()
		keepControlPlaneLogs(dir)
		os.RemoveAll(dir)
	}
	env = &benchEnv{dir: dir, cp: cp}
	ext, err := apiextensionsclient.NewForConfig(cp.Config)
	if err == nil {
		env.kube, err = kubernetes.NewForConfig(cp.Config)
	}
	if err == nil {
		env.dyn, err = dynamic.NewForConfig(cp.Config)
	}
	if err == nil {
		err = api.InstallCRDs(ctx, ext)
	}
	if err == nil {
		env.lockerKubeconfig, err = lockerKubeconfig(ctx, env.kube, cp.Config, dir)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return env, stop, nil
}

// scenario measures p on a control plane of its own. With burst, it first
// measures the cold lock of CRs created at once after the locker is up
// (see coldLock), and then, on the same releases, the cold lock of CRs
// that exist before it starts, as every scenario does.
func scenario(ctx context.Context, tools controlplane.Tools, lockerBinary string, p params, full *fullMeasure, burst bool) (*scenarioResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return nil, err
	}
	defer stop()
	kube, dyn, dir := env.kube, env.dyn, env.dir
	res := &scenarioResult{Params: p}
	start := time.Now()
	setupAll := setup
	if burst {
		setupAll = setupReleases
	}
	locked, err := setupAll(ctx, kube, dyn, p)
	if err != nil {
		return nil, err
	}
	res.SetupS = time.Since(start).Seconds()
	if err := settle(ctx, kube); err != nil {
		return nil, err
	}
	restored, err := watchConfigMaps(ctx, dyn, metav1.NamespaceAll, "app.kubernetes.io/managed-by=Helm")
	if err != nil {
		return nil, err
	}

	var idle *idleResult
	baseline := 30.0 // the API server's own idle rate, when not measured
	if full != nil {
		// The API server's own requests, with nothing else running.
		idle = &idleResult{}
		if idle.BaselineRequestsPerMin, err = requestRate(ctx, kube, full.idle); err != nil {
			return nil, err
		}
		baseline = idle.BaselineRequestsPerMin
	}
	if burst {
		if res.Burst, err = burstLock(ctx, env, restored, locked, lockerBinary, p, baseline); err != nil {
			return nil, err
		}
	}
	var rec *recording
	if full != nil && full.dashboard {
		rec = &recording{}
	}
	l, err := coldLock(ctx, env, restored, locked, lockerBinary, p, baseline, res, rec, nil)
	if err != nil {
		return nil, err
	}
	defer l.stop()
	defer rec.stop()

	quiet := func() error { return waitQuiet(ctx, kube, baseline) }
	if full != nil && full.massDriftRounds > 0 {
		for round := range full.massDriftRounds {
			if err := quiet(); err != nil {
				return nil, err
			}
			if res.MassDrift, err = massDrift(ctx, kube, dyn, l, restored, locked, p, massDriftObjects, full.concurrency, round, quiet); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	if full != nil {
		if res.Churn, err = churn(ctx, dyn, l, p, quiet); err != nil {
			return nil, err
		}
		if err := quiet(); err != nil {
			return nil, err
		}
		if res.ControllerChurn, err = controllerChurn(ctx, kube, dyn, l, p, quiet); err != nil {
			return nil, err
		}
		if err := quiet(); err != nil {
			return nil, err
		}
		if res.StatusChurn, err = statusChurn(ctx, kube, dyn, l, env.cp.Kubeconfig, dir, p, statusRate, 20*time.Second, false); err != nil {
			return nil, err
		}
		if err := quiet(); err != nil {
			return nil, err
		}
		if res.LabelChurn, err = statusChurn(ctx, kube, dyn, l, env.cp.Kubeconfig, dir, p, statusRate, 20*time.Second, true); err != nil {
			return nil, err
		}
		if err := quiet(); err != nil {
			return nil, err
		}
		if res.MassDrift, err = massDrift(ctx, kube, dyn, l, restored, locked, p, massDriftObjects, full.concurrency, 0, quiet); err != nil {
			return nil, err
		}
		if err := quiet(); err != nil {
			return nil, err
		}
		if full.churnDuring {
			// The churn keeps the API server busy: quiet is the
			// locker's own.
			churnQuiet := func() error { return waitLockerQuiet(ctx, l) }
			res.ChurnDuring, err = measureDuringChurn(ctx, kube, dyn, l, p, func() error {
				return measureLatency(ctx, dyn, restored, locked, full, res, churnQuiet)
			})
		} else {
			err = measureLatency(ctx, dyn, restored, locked, full, res, quiet)
		}
		rec.stop()
		res.dashboard = rec
		if err != nil {
			return nil, err
		}
		// The edits above leave work behind: events the locker
		// records (its event sink sends them one by one) and the
		// last status writes. Idle starts once that has drained.
		if err := waitQuiet(ctx, kube, idle.BaselineRequestsPerMin); err != nil {
			return nil, err
		}
		cpu0, _ := l.cpu()
		all := func(string) bool { return true }
		puts := func(labels string) bool { return strings.Contains(labels, `method="PUT"`) }
		sent0, err := l.sum(ctx, "rest_client_requests_total", all)
		if err != nil {
			return nil, err
		}
		put0, err := l.sum(ctx, "rest_client_requests_total", puts)
		if err != nil {
			return nil, err
		}
		method0, err := l.requestsByMethod(ctx)
		if err != nil {
			return nil, err
		}
		if idle.WithLockerPerMin, err = requestRate(ctx, kube, full.idle); err != nil {
			return nil, err
		}
		cpu1, _ := l.cpu()
		sent1, err := l.sum(ctx, "rest_client_requests_total", all)
		if err != nil {
			return nil, err
		}
		put1, err := l.sum(ctx, "rest_client_requests_total", puts)
		if err != nil {
			return nil, err
		}
		method1, err := l.requestsByMethod(ctx)
		if err != nil {
			return nil, err
		}
		idle.LockerRequestsByMethod = map[string]float64{}
		for m, n := range method1 {
			if d := n - method0[m]; d > 0 {
				idle.LockerRequestsByMethod[m] = d / full.idle.Minutes()
			}
		}
		// The locker's own count of what it sent: the API server's
		// difference from its baseline also holds its own watches
		// reopened at random, a few a minute either way. Its only PUTs
		// are Lease renewals.
		idle.LockerRequestsPerMin = (sent1 - sent0) / full.idle.Minutes()
		idle.LockerLeaseRequestsPerMin = (put1 - put0) / full.idle.Minutes()
		idle.LockerCPUSecondsPerMin = (cpu1 - cpu0).Seconds() / full.idle.Minutes()
		res.Idle = idle
	}
	if res.TermsLost, err = l.termsLost(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: %+v\n", *res)
	return res, nil
}

// burstLock measures the cold lock of CRs created at once, for releases
// that have none yet, once the locker is up, and then makes the CRs as a
// first start finds them: no claim, no status.
func burstLock(ctx context.Context, env *benchEnv, restored *configMapWatch, locked map[string][]ref, lockerBinary string, p params, baseline float64) (*scenarioResult, error) {
	res := &scenarioResult{Params: p}
	l, err := coldLock(ctx, env, restored, locked, lockerBinary, p, baseline, res, nil, func(ctx context.Context) error {
		return createCRs(ctx, env.dyn, p)
	})
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	res.TermsLost, err = l.termsLost()
	l.stop()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: burst: %+v\n", *res)
	if err := unclaimAll(ctx, env.dyn); err != nil {
		return nil, err
	}
	return res, waitQuiet(ctx, env.kube, baseline)
}

// untrackedGrowth measures the growth rows of B on one control plane:
// untracked objects are added to reach each multiple of base's, and a
// locker is started afresh for each row. Separate control planes would
// create every row's objects from nothing: 30 times base's B for rows up
// to 16x, where this creates 16 times. A restarted locker finds the CRs
// already Deployed, so a row's cold lock is the restoration of the
// ConfigMaps drifted before it started.
func untrackedGrowth(ctx context.Context, tools controlplane.Tools, lockerBinary string, base params, factors []int) ([]growthRow, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return nil, err
	}
	defer stop()
	locked, err := setup(ctx, env.kube, env.dyn, base)
	if err != nil {
		return nil, err
	}
	restored, err := watchConfigMaps(ctx, env.dyn, metav1.NamespaceAll, "app.kubernetes.io/managed-by=Helm")
	if err != nil {
		return nil, err
	}
	var rows []growthRow
	have := base.Untracked
	for _, factor := range factors {
		p := base.scaled("B", factor)
		fmt.Fprintf(os.Stderr, "bench: growth B x%d %+v\n", factor, p)
		start := time.Now()
		if err := addUntracked(ctx, env.kube, env.dyn, have, p.Untracked); err != nil {
			return nil, err
		}
		if err := settle(ctx, env.kube); err != nil {
			return nil, err
		}
		have = p.Untracked
		res := &scenarioResult{Params: p, SetupS: time.Since(start).Seconds()}
		l, err := coldLock(ctx, env, restored, locked, lockerBinary, p, 30, res, nil, nil)
		if err != nil {
			return nil, err
		}
		l.stop()
		fmt.Fprintf(os.Stderr, "bench: %+v\n", *res)
		rows = append(rows, growthRow{Dimension: "B", Factor: factor, Params: p, RSSMiB: res.RSSMiB, HeapMiB: res.HeapMiB, ColdLockS: res.ColdLockS})
	}
	return rows, nil
}

// coldLock drifts one ConfigMap of every release, starts the locker, and
// fills in res's cold-lock and memory figures. Cold lock is over once every
// CR says Deployed and each drifted ConfigMap is restored, each timed by
// its own watch event, not clamped to the moment every CR said Deployed.
// With burst, the CRs do not exist yet: once the locker is ready, burst
// creates them all at once, and the cold lock is timed from then. The
// locker is left running for the caller to stop, and rec, if not nil,
// scraping its /metrics from its start.
func coldLock(ctx context.Context, env *benchEnv, restored *configMapWatch, locked map[string][]ref, lockerBinary string, p params, baseline float64, res *scenarioResult, rec *recording, burst func(context.Context) error) (*locker, error) {
	kube, dyn, dir := env.kube, env.dyn, env.dir
	var drifted []ref
	for _, cms := range locked {
		drifted = append(drifted, cms[0])
	}
	var restoredAt []<-chan time.Time
	for _, r := range drifted {
		_, _, rv, err := edit(ctx, dyn, r, "drifted before start")
		if err != nil {
			return nil, err
		}
		restoredAt = append(restoredAt, restored.wait(r.ns+"/"+r.name, "declared", rv))
	}
	floor, read, err := listWatchFloor(ctx, env.cp.Kubeconfig)
	if err != nil {
		return nil, err
	}
	res.FloorS, res.FloorObjects = floor.Seconds(), read
	fmt.Fprintf(os.Stderr, "bench: floor: %d objects of the locked types listed and watched in %.2f s\n", read, floor.Seconds())
	apiBefore, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	audited, err := auditOffset(dir)
	if err != nil {
		return nil, err
	}
	logFile := filepath.Join(dir, fmt.Sprintf("locker-%d-%s.log", p.Untracked, map[bool]string{false: "first", true: "burst"}[burst != nil]))
	l, err := startLocker(lockerBinary, env.lockerKubeconfig, logFile, lockerArgs...)
	if err != nil {
		return nil, err
	}
	rec.record(ctx, l)
	ok := false
	defer func() {
		if !ok {
			rec.stop()
			l.stop()
		}
	}()
	timeout := time.Duration(10+p.Releases*p.Objects/100) * time.Second
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if profiles != "" {
		seconds := max(6, p.Releases*p.Objects/1000)
		mode := map[bool]string{false: "", true: "-burst"}[burst != nil]
		go l.cpuProfile(cctx, filepath.Join(profiles, fmt.Sprintf("cpu-N%d-M%d-B%d%s.pprof", p.Releases, p.Objects, p.Untracked, mode)), seconds)
		go apiServerProfile(cctx, kube, filepath.Join(profiles, fmt.Sprintf("cpu-apiserver-N%d-M%d-B%d%s.pprof", p.Releases, p.Objects, p.Untracked, mode)), seconds)
	}
	from := l.start
	if burst != nil {
		if err := l.waitReady(cctx); err != nil {
			return nil, fmt.Errorf("cold lock: %w\n%s", err, tailFile(logFile))
		}
		from = time.Now()
		if err := burst(cctx); err != nil {
			return nil, err
		}
	}
	deployedAt, err := waitDeployed(cctx, dyn, p.Releases)
	if err != nil {
		return nil, fmt.Errorf("cold lock: %w\n%s", err, tailFile(logFile))
	}
	var last time.Time
	for i, ch := range restoredAt {
		select {
		case t := <-ch:
			last = later(last, t)
		case <-cctx.Done():
			r := drifted[i]
			obj, err := dyn.Resource(cmGVR).Namespace(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			if err == nil {
				v, _, _ := unstructured.NestedString(obj.Object, "data", "key")
				return nil, fmt.Errorf("cold lock: %s/%s was not seen restored within %s; it now has data.key=%q at resourceVersion %s\n%s", r.ns, r.name, timeout, v, obj.GetResourceVersion(), tailFile(logFile))
			}
			return nil, fmt.Errorf("cold lock: %s/%s was not seen restored within %s: %v", r.ns, r.name, timeout, err)
		}
	}
	res.DeployedS = max(0, deployedAt.Sub(from).Seconds())
	res.RestoredS = last.Sub(from).Seconds()
	res.ColdLockS = max(res.DeployedS, res.RestoredS)
	res.ObjectsPerS = float64(p.Releases*p.Objects) / res.ColdLockS
	if cpu, err := l.cpu(); err == nil {
		res.ColdLockCPUS = cpu.Seconds()
		fmt.Fprintf(os.Stderr, "bench: the locker used %.2f s of CPU by the end of its cold lock\n", cpu.Seconds())
	}

	// Memory is read at the same point in every scenario: once the work
	// the cold lock leaves behind (events, the last status writes) has
	// drained, the locker has been idle long enough to do what it does
	// when quiet (hand back memory), and before any measurement adds work
	// of its own. The bench's read of /metrics is such work: a scrape's
	// garbage stays resident until the next collection, so the RSS five
	// seconds after it is kept beside, as a scraped locker holds it.
	if err := waitQuiet(ctx, kube, baseline); err != nil {
		return nil, err
	}
	if res.IdleAfterS, err = waitLockerIdle(ctx, l); err != nil {
		return nil, err
	}
	rss, err := l.rss()
	if err != nil {
		return nil, err
	}
	res.RSSMiB = float64(rss) / (1 << 20)
	if res.RSSAnonMiB, res.RSSFileMiB, err = l.rssSplit(); err != nil {
		return nil, err
	}
	if err := startRequests(ctx, l, res, apiBefore, kube, dir, audited); err != nil {
		return nil, err
	}
	time.Sleep(5 * time.Second)
	if rss, err = l.rss(); err != nil {
		return nil, err
	}
	res.RSSScrapedMiB = float64(rss) / (1 << 20)
	fmt.Fprintf(os.Stderr, "bench: RSS %.1f MiB once the locker was idle (%.0f s after the API server went quiet), %.1f MiB five seconds after a read of its /metrics\n", res.RSSMiB, res.IdleAfterS, res.RSSScrapedMiB)
	profile := ""
	if profiles != "" {
		profile = filepath.Join(profiles, fmt.Sprintf("heap-N%d-M%d-B%d.pprof", p.Releases, p.Objects, p.Untracked))
	}
	heap, err := l.heap(ctx, profile)
	if err != nil {
		return nil, err
	}
	res.HeapMiB = float64(heap) / (1 << 20)
	res.memory = l.memory(ctx)
	ok = true
	return l, nil
}

// Idle, as waitLockerIdle tells it: the locker's own trim (see
// cmd/helm-locker's trimResident) runs after two polls a second apart
// with at most 20 ms of CPU each, when the work since the last one was
// worth one (a quarter of a second of CPU), so four such seconds in a row
// come after it, if one was due, even when its own collection broke the
// run.
const (
	idleCPU   = 20 * time.Millisecond
	idlePolls = 4
)

// waitLockerIdle waits, up to two minutes, until the locker has used at
// most idleCPU in each of idlePolls seconds in a row, and returns how long
// that took; -1 if it never was, which the bench says, and memory is read
// anyway.
func waitLockerIdle(ctx context.Context, l *locker) (float64, error) {
	start := time.Now()
	last, err := l.cpu()
	if err != nil {
		return 0, err
	}
	for quiet := 0; quiet < idlePolls; {
		if time.Since(start) > 2*time.Minute {
			fmt.Fprintf(os.Stderr, "bench: the locker used more than %s of CPU in one second of every %d for two minutes after the API server went quiet; reading its memory anyway\n", idleCPU, idlePolls)
			return -1, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
		cpu, err := l.cpu()
		if err != nil {
			return 0, err
		}
		if cpu-last <= idleCPU {
			quiet++
		} else {
			quiet = 0
		}
		last = cpu
	}
	return time.Since(start).Seconds(), nil
}

// waitQuiet waits, up to two minutes, until a 5 s window has at most the
// baseline rate plus the Lease renewals (about 12 requests a minute).
func waitQuiet(ctx context.Context, kube kubernetes.Interface, baselinePerMin float64) error {
	return waitQuietWithin(ctx, kube, baselinePerMin, 2*time.Minute)
}

// settle waits, up to 15 minutes, until the controller-manager has done
// what objects just created ask of it (ReplicaSets and pods of the
// Deployments, endpoints of the Services): a locker started before then
// would be measured against its load.
func settle(ctx context.Context, kube kubernetes.Interface) error {
	return waitQuietWithin(ctx, kube, 30, 15*time.Minute)
}

func waitQuietWithin(ctx context.Context, kube kubernetes.Interface, baselinePerMin float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		rate, err := requestRate(ctx, kube, 5*time.Second)
		if err != nil {
			return err
		}
		if rate <= baselinePerMin+12 {
			return nil
		}
		fmt.Fprintf(os.Stderr, "bench: waiting for the API server to go quiet (%.0f requests/min)\n", rate)
	}
	return nil
}

// waitLockerQuiet waits, up to two minutes, until the locker sends at most
// one request (a Lease renewal) in a 5 s window: its bookkeeping of earlier
// work has drained. It is waitQuiet for when another client keeps the API
// server busy.
func waitLockerQuiet(ctx context.Context, l *locker) error {
	all := func(string) bool { return true }
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		before, err := l.sum(ctx, "rest_client_requests_total", all)
		if err != nil {
			return err
		}
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		after, err := l.sum(ctx, "rest_client_requests_total", all)
		if err != nil {
			return err
		}
		if after-before <= 1 {
			return nil
		}
		fmt.Fprintf(os.Stderr, "bench: waiting for the locker to go quiet (%.0f requests in 5 s)\n", after-before)
	}
	return nil
}

// requestRate counts the requests the API server answers per minute over a
// window, and names what they were.
func requestRate(ctx context.Context, kube kubernetes.Interface, window time.Duration) (float64, error) {
	before, err := requestCounts(ctx, kube)
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	after, err := requestCounts(ctx, kube)
	if err != nil {
		return 0, err
	}
	var total float64
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			total += d
			fmt.Fprintf(os.Stderr, "bench: idle window: %.0f × %s\n", d, k)
		}
	}
	return total / window.Minutes(), nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// churn touches every locked object once with a label of another field
// manager, as other controllers and people do all day, and returns what
// the locker wrote in answer and the drifts it counted: both must be 0.
// Half the releases are real-chart-shaped (see releaseObjects), so this is
// also where a value the API server normalizes would show as a write.
func churn(ctx context.Context, dyn dynamic.Interface, l *locker, p params, quiet func() error) (*churnResult, error) {
	writes0, drifts0, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	refs := releaseRefs(p)
	work := make(chan objectRef)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for r := range work {
				_, err := dyn.Resource(r.gvr).Namespace(r.ns).Patch(ctx, r.name, types.MergePatchType,
					[]byte(`{"metadata":{"labels":{"bench.example.com/touched":"yes"}}}`), metav1.PatchOptions{FieldManager: "churn"})
				if err != nil {
					select {
					case errs <- fmt.Errorf("touching %s %s/%s: %w", r.gvr.Resource, r.ns, r.name, err):
					default:
					}
				}
			}
		})
	}
	for _, r := range refs {
		work <- r
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	// Drift is recorded up to 2 s later (see bookkeepingDelay).
	time.Sleep(3 * time.Second)
	if err := quiet(); err != nil {
		return nil, err
	}
	writes1, drifts1, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	return &churnResult{Touched: len(refs), LockerWrites: writes1 - writes0, Drifts: drifts1 - drifts0}, nil
}

// answers reads what the locker did in answer to others' writes so far:
// its own writes, and the drifts counted on every HelmRelease CR.
func (l *locker) answers(ctx context.Context, dyn dynamic.Interface) (writes float64, drifts int64, err error) {
	if writes, err = l.writes(ctx); err != nil {
		return 0, 0, err
	}
	drifts, err = driftsDetected(ctx, dyn)
	return writes, drifts, err
}

// driftsDetected sums status.driftsDetected over every HelmRelease CR.
func driftsDetected(ctx context.Context, dyn dynamic.Interface) (int64, error) {
	list, err := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, cr := range list.Items {
		d, _, _ := unstructured.NestedInt64(cr.Object, "status", "driftsDetected")
		n += d
	}
	return n, nil
}

// churnDuring is what the locker did about another field manager that
// touched objects all through the latency measurement: the Deployments,
// Services and Secrets of every release, each about once a minute, which
// the measured edits (of ConfigMaps) never touch. Its writes to those
// kinds are the API server's count of writes to them less the churn's own;
// its drifts are its drift counters of those kinds.
type churnDuring struct {
	Touched      int     `json:"touches"`
	Seconds      float64 `json:"seconds"`
	LockerWrites float64 `json:"lockerWrites"`
	Drifts       float64 `json:"driftsDetected"`
}

// churnedResources are the kinds backgroundChurn touches, as the API
// server's metrics name them, and churnedKinds as the locker's do.
var (
	churnedResources = []string{"deployments", "services", "secrets"}
	churnedKinds     = []string{"Deployment", "Service", "Secret"}
)

// churnedRefs are the objects backgroundChurn touches.
func churnedRefs(p params) []objectRef {
	var refs []objectRef
	for _, r := range releaseRefs(p) {
		if r.gvr != cmGVR {
			refs = append(refs, r)
		}
	}
	return refs
}

// backgroundChurn labels each of churnedRefs about once a minute until
// stop is closed, and returns how many touches it made.
func backgroundChurn(ctx context.Context, dyn dynamic.Interface, p params, stop <-chan struct{}) (int, error) {
	refs := churnedRefs(p)
	if len(refs) == 0 {
		return 0, nil
	}
	tick := time.NewTicker(time.Minute / time.Duration(len(refs)))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return n, nil
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
		}
		r := refs[n%len(refs)]
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"bench.example.com/churn":"%d"}}}`, n)
		if _, err := dyn.Resource(r.gvr).Namespace(r.ns).Patch(ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "churn"}); err != nil {
			return n, fmt.Errorf("touching %s %s/%s: %w", r.gvr.Resource, r.ns, r.name, err)
		}
	}
}

// writesTo sums the API server's counts of writes to resources.
func writesTo(counts map[string]float64, resources []string) float64 {
	var n float64
	for k, v := range counts {
		if !strings.Contains(k, `verb="PATCH"`) && !strings.Contains(k, `verb="POST"`) && !strings.Contains(k, `verb="PUT"`) && !strings.Contains(k, `verb="DELETE"`) {
			continue
		}
		for _, r := range resources {
			if strings.Contains(k, `resource="`+r+`"`) && strings.Contains(k, `subresource=""`) {
				n += v
			}
		}
	}
	return n
}

// measureDuringChurn runs measure while backgroundChurn runs, and returns
// what the locker did about the churn.
func measureDuringChurn(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, l *locker, p params, measure func() error) (*churnDuring, error) {
	counts0, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	drifts0, err := l.driftsOf(ctx, churnedKinds)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	stop := make(chan struct{})
	type outcome struct {
		n   int
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		n, err := backgroundChurn(ctx, dyn, p, stop)
		done <- outcome{n, err}
	}()
	merr := measure()
	close(stop)
	churned := <-done
	if merr != nil {
		return nil, merr
	}
	if churned.err != nil {
		return nil, churned.err
	}
	res := &churnDuring{Touched: churned.n, Seconds: time.Since(start).Seconds()}
	// Drift is recorded up to 2 s later (see bookkeepingDelay).
	time.Sleep(3 * time.Second)
	counts1, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	drifts1, err := l.driftsOf(ctx, churnedKinds)
	if err != nil {
		return nil, err
	}
	res.LockerWrites = writesTo(counts1, churnedResources) - writesTo(counts0, churnedResources) - float64(churned.n)
	res.Drifts = drifts1 - drifts0
	return res, nil
}

package main

import (
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func numCPU() int { return runtime.NumCPU() }

// write stores the report as JSON, a markdown summary and its plots: the
// revert latency, and the dashboard's main panels (see plotDashboard).
func write(dir string, rep *report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "benchmarks.json"), rep); err != nil {
		return err
	}
	if err := plotLatency(filepath.Join(dir, "revert-latency.png"), rep.Base); err != nil {
		return err
	}
	if d := rep.Base.dashboard; d != nil && len(d.scrapes) > 0 {
		if err := plotDashboard(filepath.Join(dir, "dashboard-panels.png"), d); err != nil {
			return err
		}
	}
	if len(rep.Series) > 0 {
		if err := plotSeries(filepath.Join(dir, "scale-series.png"), rep.Series); err != nil {
			return err
		}
	}
	md := markdown(rep)
	fmt.Print(md)
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(md), 0o644)
}

func markdown(rep *report) string {
	b := &strings.Builder{}
	r := rep.Base
	p := r.Params
	fmt.Fprintf(b, "# Benchmarks\n\nMeasured by `make bench` on %s, %s, against a local etcd 3.6 and kube-apiserver v1.36 on the same machine. ", rep.Date, rep.Machine)
	if rep.Locker != "" {
		fmt.Fprintf(b, "The binary measured: %s. ", rep.Locker)
	}
	fmt.Fprintf(b, "The locker runs as its own process. Scenario: N=%d releases × M=%d objects (60%% ConfigMaps of ~1 KB, 20%% Services, 20%% Secrets; in half the releases, real-chart-shaped Deployments in place of the Services: quantities as people write them, empty maps and lists, defaulted fields), B=%d untracked objects; release Secrets written by Helm's own storage driver.\n\n", p.Releases, p.Objects, p.Untracked)
	if rep.Note != "" {
		fmt.Fprintf(b, "%s\n\n", rep.Note)
	}
	targets(b, rep)
	fmt.Fprintf(b, "## Cold lock\n\n| figure | value |\n|---|---|\n")
	fmt.Fprintf(b, "| every CR `Deployed` | %.2f s after process start |\n", r.DeployedS)
	fmt.Fprintf(b, "| every object drifted before start restored (each by its own watch event) | %.2f s |\n", r.RestoredS)
	fmt.Fprintf(b, "| cold lock | %.2f s, **%.0f objects/s** |\n", r.ColdLockS, r.ObjectsPerS)
	if r.StartRequests > 0 {
		fmt.Fprintf(b, "| the locker's requests from start until quiet | **%.0f** (%.2f per release; by method %v) |\n", r.StartRequests, r.StartRequests/float64(p.Releases), r.StartRequestsByMethod)
	}
	if u := r.Burst; u != nil {
		fmt.Fprintf(b, "| CRs created at once after the locker is ready: every CR `Deployed` | %.2f s after their creation began |\n", u.DeployedS)
		fmt.Fprintf(b, "| the same: cold lock | %.2f s, **%.0f objects/s** |\n", u.ColdLockS, u.ObjectsPerS)
	}
	b.WriteString("\n")
	startRequestsTable(b, r)
	if t := rep.TwoWay; t != nil && len(t.Off) > 0 && len(t.Report) > 0 {
		twoWayMarkdown(b, t)
	}
	if c := r.Churn; c != nil {
		fmt.Fprintf(b, "## Churn\n\nAnother field manager touched each of the %d locked objects once with a label, as other controllers and people do. What the locker did in answer must be nothing.\n\n| figure | value |\n|---|---|\n| the locker's writes (POST, PATCH, DELETE) | **%.0f** |\n| drifts counted | **%d** |\n\n", c.Touched, c.LockerWrites, c.Drifts)
		if d := r.ChurnDuring; d != nil {
			fmt.Fprintf(b, "All through the latency measurement below, the same manager also touched every Deployment, Service and Secret of the releases about once a minute (%d touches in %.0f s); the measured edits are of ConfigMaps. The locker's writes to those kinds are the API server's count less the churn's own.\n\n| figure | value |\n|---|---|\n| the locker's writes to Deployments, Services and Secrets | **%.0f** |\n| drifts counted on them | **%.0f** |\n\n", d.Touched, d.Seconds, d.LockerWrites, d.Drifts)
		}
	}
	if c := r.ControllerChurn; c != nil {
		fmt.Fprintf(b, "The Deployment controller, kube-controller-manager's own, wrote the status of the %d locked Deployments as their pods were marked Ready, and again as they were marked not Ready (there is no kubelet: the bench marks them, as a kubelet would).\n\n| figure | value |\n|---|---|\n| the Deployment controller's status writes | %.0f |\n| the locker's writes | **%.0f** |\n| drifts counted | **%d** |\n\n", c.Deployments, c.StatusWrites, c.LockerWrites, c.Drifts)
	}
	if c := r.StatusChurn; c != nil {
		fmt.Fprintf(b, "## Status churn\n\nOther controllers writing the status of locked objects, or labels of their own on them, change nothing a lock holds, and make most of a busy cluster's events. 48 writers sent status writes to the %d locked Deployments, round and round, aiming at %.0f a second for %.0f s, each a condition of their own that the Deployment controller keeps as it is (it would write back replica counts), and then as many label writes; the controller's own status writes in the window are events too, and count in the figures per event; the locker's CPU is read from /proc, less its idle CPU over as long just before. The floor is a bare watcher of every Deployment, run beside the locker through the same window: a Go process that receives each event over the same HTTP/2 and TLS and reads its bytes, decoding nothing.\n\n| figure | value | target |\n|---|---|---|\n", c.Deployments, c.TargetPerS, c.Seconds)
		fmt.Fprintf(b, "| the Deployment controller's status writes in the window | %.0f | |\n", c.ControllerWrites)
		fmt.Fprintf(b, "| status writes the API server took | %d (%.0f/s) | 1000/s |\n| **the locker's CPU per event** | **%.1f µs** | ≤ 20 µs |\n| a bare watcher's CPU per event, the floor | %.1f µs | |\n| the locker's CPU at that rate | %.3f cores | ≤ 0.1 core at 1000/s |\n| the locker's writes | %.0f | 0 |\n| drifts counted | %d | 0 |\n",
			c.Writes, c.WritesPerS, c.CPUPerEvent, c.FloorPerEvent, c.Cores, c.LockerWrites, c.Drifts)
		if c := r.LabelChurn; c != nil {
			fmt.Fprintf(b, "| label writes (a label no chart declares, by another manager) the API server took | %d (%.0f/s) | 1000/s |\n| **the locker's CPU per label event** | **%.1f µs** | ≤ 20 µs |\n| a bare watcher's CPU per label event, the floor | %.1f µs | |\n| the locker's CPU at that rate | %.3f cores | ≤ 0.1 core at 1000/s |\n| the locker's writes and drifts counted | %.0f, %d | 0, 0 |\n",
				c.Writes, c.WritesPerS, c.CPUPerEvent, c.FloorPerEvent, c.Cores, c.LockerWrites, c.Drifts)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "## Revert latency\n\nFrom the watch event showing the edit, the moment the drift exists for any watcher, to the one showing the value restored. The floor, measured in the same run, is an edit of an untracked ConfigMap until its own watch event arrives: one PATCH round trip plus watch delivery. The concurrent floor sends as many such edits at once as the concurrent measurement does, since the API server slows under that load for every client. Floor and reverts are taken in turns, one sample or one round of each, so that both meet the same load (the churn below, the locker's bookkeeping of earlier reverts); each concurrent round starts once the API server is quiet again. Back to back: %d edits to three ConfigMaps of one release (A B C A B), each sent as soon as the one before is answered, one release at a time; every edit, the first of two to one object too, must be followed by its object's restoration.\n\n", burst)
	fmt.Fprintf(b, "| | samples | timeouts | p50 ms | p90 ms | p99 ms | max ms | p50 / floor p50 | p99 / floor p99 |\n|---|---|---|---|---|---|---|---|---|\n")
	row := func(name string, d, floor distribution) {
		fmt.Fprintf(b, "| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f× | %.2f× |\n", name, d.Count, d.Timeouts, d.P50, d.P90, d.P99, d.Max, d.P50/floor.P50, d.P99/floor.P99)
	}
	row("floor", r.Floor, r.Floor)
	row("single edits", r.Single, r.Floor)
	row(fmt.Sprintf("floor, %v at once", rep.Settings["concurrency"]), r.ConcurrentFloor, r.ConcurrentFloor)
	row(fmt.Sprintf("%v concurrent edits", rep.Settings["concurrency"]), r.Concurrent, r.ConcurrentFloor)
	row(fmt.Sprintf("%d back to back in one release", burst), r.BackToBack, r.Floor)
	fmt.Fprintf(b, "\n![revert latency](revert-latency.png)\n\n")
	readWhen := "in every scenario once the API server is quiet after the cold lock, 5 s after the bench read the locker's /metrics"
	if r.IdleAfterS != 0 {
		readWhen = "at the same point in every scenario, once the API server is quiet after the cold lock and the locker has been idle (at most 20 ms of CPU in each of four seconds in a row, which comes after its own hand-back of memory when it goes quiet after work worth one), before the bench reads its /metrics"
	}
	fmt.Fprintf(b, "## Memory and idle load\n\nMemory is read %s: RSS from /proc, then the live Go heap (`go_memstats_heap_alloc_bytes` from the locker's /metrics right after a garbage collection, which a heap profile with `gc=1` forces). A slope per object is the least-squares fit over the rows of How cost grows, with its 95%% interval from their scatter; a target says met or missed of it only if the whole interval does.\n\n| figure | value |\n|---|---|\n| RSS, settled | %.1f MiB |\n| live heap, settled | %.1f MiB |\n", readWhen, r.RSSMiB, r.HeapMiB)
	if rep.Derived.BytesPerLockedObject != 0 || rep.Derived.BytesPerUntrackedObject != 0 {
		d := rep.Derived
		fmt.Fprintf(b, "| per locked object, RSS, slope over 1×, 2×, 4× M | %s |\n| per locked object, RSS, slope over 1×, 2×, 4× N | %s |\n| **per locked object, RSS** (the larger) | **%s** |\n| per locked object, live heap, over M / over N | %.0f / %.0f bytes |\n",
			bytesWithin(d.BytesPerLockedObjectByM, d.BytesPerLockedObjectByM95), bytesWithin(d.BytesPerLockedObjectByN, d.BytesPerLockedObjectByN95), bytesWithin(d.BytesPerLockedObject, d.BytesPerLockedObject95), d.HeapPerLockedObject, d.HeapPerLockedObjectByN)
		maxB := 1
		for _, g := range rep.Growth {
			if g.Dimension == "B" {
				maxB = max(maxB, g.Factor)
			}
		}
		fmt.Fprintf(b, "| per untracked object (slope over 1× to %d× B), RSS | %s |\n| per untracked object, live heap | %.0f bytes |\n", maxB, bytesWithin(d.BytesPerUntrackedObject, d.BytesPerUntrackedObject95), d.HeapPerUntrackedObject)
	}
	if r.Idle != nil {
		fmt.Fprintf(b, "| API server requests/min with nothing running (baseline) | %.1f |\n", r.Idle.BaselineRequestsPerMin)
		fmt.Fprintf(b, "| the same with the locker idle | %.1f |\n", r.Idle.WithLockerPerMin)
		fmt.Fprintf(b, "| **the locker's idle requests/min** (its own client's count) | %.1f |\n", r.Idle.LockerRequestsPerMin)
		fmt.Fprintf(b, "| of which leader-election Lease renewals (`--leader-elect-retry-period`, default 10s) | %.1f |\n", r.Idle.LockerLeaseRequestsPerMin)
		fmt.Fprintf(b, "| **without Lease renewals** | %.1f |\n", r.Idle.LockerRequestsPerMin-r.Idle.LockerLeaseRequestsPerMin)
		fmt.Fprintf(b, "| the locker's idle CPU | %.3f s/min |\n", r.Idle.LockerCPUSecondsPerMin)
	}
	if len(rep.Growth) > 0 {
		fmt.Fprintf(b, "\n## How cost grows\n\nOnly the named dimension changes. Each N and M row is its own control plane. The B rows share one: untracked objects are added between rows and each row's locker is started afresh, so its cold lock is the restoration of the ConfigMaps drifted before it started (its CRs already say Deployed).\n\n| dimension | factor | N | M | B | RSS MiB | live heap MiB | cold lock s |\n|---|---|---|---|---|---|---|---|\n")
		for _, g := range rep.Growth {
			fmt.Fprintf(b, "| %s | %d× | %d | %d | %d | %.1f | %.1f | %.2f |\n", g.Dimension, g.Factor, g.Params.Releases, g.Params.Objects, g.Params.Untracked, g.RSSMiB, g.HeapMiB, g.ColdLockS)
		}
	}
	if len(rep.Series) > 0 {
		seriesMarkdown(b, rep)
	}
	fmt.Fprintf(b, "\nRaw figures: [benchmarks.json](benchmarks.json).\n")
	return b.String()
}

// startRequestsTable is what r's locker asked the API server from its
// start until its cold lock went quiet, by verb and resource, for CRs that
// existed before it started and, beside it, for CRs created at once after.
func startRequestsTable(b *strings.Builder, r *scenarioResult) {
	if len(r.StartRequestsByResource) == 0 {
		return
	}
	u := r.Burst
	if u == nil {
		u = &scenarioResult{}
	}
	keys := map[string]bool{}
	for k := range r.StartRequestsByResource {
		keys[k] = true
	}
	for k := range u.StartRequestsByResource {
		keys[k] = true
	}
	fmt.Fprintf(b, "The locker's requests from its start until its cold lock went quiet, by verb and resource, as the API server's audit log records them for the locker's ServiceAccount alone, at %d locked objects in %d releases. A GET of a locked object is one its informers' lists did not answer.\n\n", r.Params.Releases*r.Params.Objects, r.Params.Releases)
	fmt.Fprintf(b, "| verb and resource | CRs before the locker starts | CRs created at once after it is ready |\n|---|---|---|\n")
	fmt.Fprintf(b, "| **GETs of locked objects** | **%.0f** (%.2f a release) | **%.0f** (%.2f a release) |\n", r.StartLockedGets, r.StartLockedGets/float64(r.Params.Releases), u.StartLockedGets, u.StartLockedGets/float64(r.Params.Releases))
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		fmt.Fprintf(b, "| %s | %.0f | %.0f |\n", k, r.StartRequestsByResource[k], u.StartRequestsByResource[k])
	}
	b.WriteString("\n")
}

// seriesWhen says whether a series measured alone came before or after
// the run of the sections above it: both dates are RFC 3339 in UTC, which
// sort as strings.
func seriesWhen(rep *report) string {
	if rep.SeriesDate < rep.Date {
		return "before"
	}
	return "after"
}

// seriesMarkdown is the scale series: a table of each row's figures, the
// targets at the largest row, and the plot.
func seriesMarkdown(b *strings.Builder, rep *report) {
	series := rep.Series
	fmt.Fprintf(b, "\n## Scale series: one replica\n\n")
	if rep.SeriesDate != "" {
		fmt.Fprintf(b, "Measured on %s, %s the sections above, by make bench's series run alone (`go run ./e2e/cmd/bench -series %s -series-only`), on a control plane running kube-controller-manager, whose work after setup each row waits out.\n\n", rep.SeriesDate, seriesWhen(rep), seriesFlag(series))
	}
	if rep.SeriesLocker != "" {
		fmt.Fprintf(b, "The binary measured: %s.\n\n", rep.SeriesLocker)
	}
	if rep.SeriesNote != "" {
		fmt.Fprintf(b, "%s\n\n", rep.SeriesNote)
	}
	fmt.Fprintf(b, "Each row is its own control plane: N releases of 50 objects each (shaped as above), plus as many untracked objects, measured in full as the base scenario is. Revert latency is against the floor of the same run. Idle requests leave out the Lease renewals (6 a minute). CPU per status event is from the status churn (above), the mass drift from a script changing one held field of 5,000 locked ConfigMaps at once at 50 at a time, against the same 5,000 PATCHes to untracked ConfigMaps sent the same way.\n\n")
	fmt.Fprintf(b, "| locked objects | releases | cold lock s | objects/s | requests at start (per release) | CRs created at once after start: cold lock s, objects/s, requests (per release) | GETs of locked objects at start, before / burst | RSS MiB | live heap MiB | single p50 / p99 ms | × floor p50 / p99 | idle requests/min | idle CPU s/min | µs per status event; per label event | mass drift: restored after / floor s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range series {
		idleReq, idleCPU := 0.0, 0.0
		if r.Idle != nil {
			idleReq, idleCPU = r.Idle.LockerRequestsPerMin-r.Idle.LockerLeaseRequestsPerMin, r.Idle.LockerCPUSecondsPerMin
		}
		churn := "—"
		if c := r.StatusChurn; c != nil {
			churn = fmt.Sprintf("%.1f (%.0f/s; floor %.1f)", c.CPUPerEvent, c.WritesPerS, c.FloorPerEvent)
		}
		if c := r.LabelChurn; c != nil {
			churn += fmt.Sprintf("; label %.1f (%.0f/s; floor %.1f)", c.CPUPerEvent, c.WritesPerS, c.FloorPerEvent)
		}
		mass := "—"
		if m := r.MassDrift; m != nil {
			mass = fmt.Sprintf("%.2f / %.2f (%d lost)", m.RestoredS, m.FloorS, m.Lost)
		}
		burst, burstGets := "—", "—"
		if u := r.Burst; u != nil {
			burst = fmt.Sprintf("%.1f, %.0f, %.0f (%.2f)", u.ColdLockS, u.ObjectsPerS, u.StartRequests, u.StartRequests/float64(r.Params.Releases))
			burstGets = fmt.Sprintf("%.0f", u.StartLockedGets)
		}
		fmt.Fprintf(b, "| %d | %d | %.1f | %.0f | %.0f (%.2f) | %s | %.0f / %s | %.0f | %.0f | %.1f / %.1f | %.2f× / %.2f× | %.1f | %.3f | %s | %s |\n",
			r.Params.Releases*r.Params.Objects, r.Params.Releases, r.ColdLockS, r.ObjectsPerS, r.StartRequests, r.StartRequests/float64(r.Params.Releases), burst, r.StartLockedGets, burstGets,
			r.RSSMiB, r.HeapMiB, r.Single.P50, r.Single.P99, r.Single.P50/r.Floor.P50, r.Single.P99/r.Floor.P99, idleReq, idleCPU, churn, mass)
	}
	coldLockTable(b, series)
	top := series[len(series)-1]
	fmt.Fprintf(b, "\nTargets at %d locked objects, and why each one missed is missed:\n\n| figure | measured | target | met | why not |\n|---|---|---|---|---|\n", top.Params.Releases*top.Params.Objects)
	for _, g := range seriesGoals(series) {
		met, why := "no", strings.Join(slices.DeleteFunc([]string{g.why, rep.SeriesWhy[g.name]}, func(s string) bool { return s == "" }), "; ")
		if g.met {
			met, why = "yes", ""
		} else if why == "" {
			why = "not explained yet"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", g.name, g.value, g.target, met, why)
	}
	fmt.Fprintf(b, "\n")
	startRequestsTable(b, top)
	fmt.Fprintf(b, "![scale series](scale-series.png)\n")
}

// seriesFlag is the -series flag that measures series again.
func seriesFlag(series []*scenarioResult) string {
	counts := make([]string, len(series))
	for i, r := range series {
		counts[i] = strconv.Itoa(r.Params.Releases * r.Params.Objects)
	}
	return strings.Join(counts, ",")
}

// seriesGoal is one of the scale series' targets: what was measured, and
// for a target that can be missed, why it was, from the same run's figures.
type seriesGoal struct {
	name, value, target string
	met                 bool
	why                 string
}

// termsLostGoal sums the leader terms the series' lockers lost: each
// relocks everything, so a row with one measures that, not the lock. A
// report from before they were counted has no such goal.
func termsLostGoal(series []*scenarioResult) (seriesGoal, bool) {
	g := seriesGoal{name: "leader terms lost, in every row and mode", target: "0"}
	lost, counted := 0, 0
	for _, r := range series {
		for _, m := range []*scenarioResult{r, r.Burst} {
			if m != nil && m.TermsLost != nil {
				lost += *m.TermsLost
				counted++
			}
		}
	}
	g.value, g.met = fmt.Sprintf("%d, in %d lockers' logs", lost, counted), lost == 0
	g.why = "a locker that cannot renew its Lease within the renew deadline stops, stands by, and locks everything afresh: its log says when"
	return g, counted > 0
}

// seriesGoals checks the scale series against the targets of the cold lock
// at scale, at its largest row (and the cold lock at each), with a reason
// for each one missed.
func seriesGoals(series []*scenarioResult) []seriesGoal {
	top := series[len(series)-1]
	n := float64(top.Params.Releases)
	p99 := top.Single.P99 / top.Floor.P99
	goals := []seriesGoal{
		{name: "RSS", value: fmt.Sprintf("%.0f MiB", top.RSSMiB), target: "≤ 512 MiB", met: top.RSSMiB <= 512,
			why: fmt.Sprintf("%.0f MiB of it is the live heap", top.HeapMiB)},
		{name: "revert p99 / floor p99, after the cold lock", value: fmt.Sprintf("%.2f×", p99), target: "≤ 2×", met: p99 <= 2,
			why: fmt.Sprintf("p50 is %.2f× the floor's: the tail alone, of %d reverts; at this size the API server's collections mark for seconds about twice a minute, and stalls of a few seconds such as those set a p99, by which samples, the floor's or the reverts', they fall on (design-notes.md)", top.Single.P50/top.Floor.P50, top.Single.Count)},
	}
	for _, r := range series {
		// The Lease's renewals come every 10 s: a one-minute window
		// holds six or seven of them.
		name := fmt.Sprintf("idle requests beyond the Lease's renewals at %d", r.Params.Releases*r.Params.Objects)
		if i := r.Idle; i != nil {
			beyond := i.LockerRequestsPerMin - i.LockerLeaseRequestsPerMin
			goals = append(goals, seriesGoal{name: name, value: fmt.Sprintf("%.1f/min (and %.1f renewals; by method %v)", beyond, i.LockerLeaseRequestsPerMin, i.LockerRequestsByMethod),
				target: "0", met: beyond <= 0})
		} else {
			goals = append(goals, seriesGoal{name: name, value: "not measured", target: "0"})
		}
	}
	if g, counted := termsLostGoal(series); counted {
		goals = append(goals, g)
	}
	if top.StartRequests > 0 {
		by := top.StartRequestsByResource
		events := top.StartRequestsByMethod["POST"]
		writes := by["patch helmreleases"] + by["patch helmreleases/status"] + by["create events"] + by["patch configmaps"]
		goals = append(goals,
			seriesGoal{name: "requests at a first start", value: fmt.Sprintf("%.2f a release (%.0f); the bench drifts one ConfigMap of each release, whose dry run, PATCH and event count in them", top.StartRequests/n, top.StartRequests),
				target: "≤ 2 a release, plus 1 a type", met: top.StartRequests <= 2*n+10,
				why: fmt.Sprintf("%.2f a release are the writes a lock makes: its CR's finalizer (%.0f PATCHes), its status (%.0f), its events, Locked and DriftCorrected (%.0f), and the drifted ConfigMap's dry run and correction (%.0f); the reads and the rest are %.2f a release", writes/n, by["patch helmreleases"], by["patch helmreleases/status"], by["create events"], by["patch configmaps"], (top.StartRequests-writes)/n)},
			// A first start writes Locked, and DriftCorrected for the
			// drifted ConfigMap, on every CR: fewer means events lost.
			seriesGoal{name: "events written at a first start (POSTs)", value: fmt.Sprintf("%.0f for %d releases", events, top.Params.Releases),
				target: "2 a release, none dropped", met: events >= 2*n})
	}
	if u := top.Burst; u != nil {
		gets := max(top.StartLockedGets, u.StartLockedGets)
		goals = append(goals, seriesGoal{name: "GETs of locked objects at start, the larger of CRs before start and CRs created at once after", value: fmt.Sprintf("%.2f a release (%.0f / %.0f)", gets/n, top.StartLockedGets, u.StartLockedGets),
			target: "≤ 2 a release, not one an object", met: gets <= 2*n})
	}
	for _, r := range series {
		objects := r.Params.Releases * r.Params.Objects
		for _, m := range []struct {
			mode, cost string
			r          *scenarioResult
		}{
			{"CRs before the start", "a start pays, one after the other, for its CR and release Secret caches and the listing of the deployed release Secrets, the merge rules and resolving every object, the informers' lists, and the first syncs' writes", r},
			{"CRs in a burst after it", "a burst pays for its gatherings of CRs (each ends 300 ms after the last CR, 5 s at most after its first, and takes in those that come while it is declared), the listing of their release Secrets, a relist of each type a gathering, and the first syncs' writes", r.Burst},
		} {
			if m.r == nil {
				continue
			}
			x := 0.0
			if m.r.FloorS > 0 {
				x = m.r.ColdLockS / m.r.FloorS
			}
			why := fmt.Sprintf("%s: a dry run and a correction of the drifted ConfigMap, a status and two events a release, which load the API server the floor leaves idle (design-notes.md has the phases)", m.cost)
			rate := why
			if m.r.FloorS > 0 {
				need := float64(objects) / 2000
				rate = fmt.Sprintf("2,000 objects/s is %.1f s here, %.2f× this run's floor of %.2f s, and the cold lock took %.2f×; %s", need, need/m.r.FloorS, m.r.FloorS, x, why)
			}
			goals = append(goals, seriesGoal{name: fmt.Sprintf("cold lock at %d, %s", objects, m.mode), value: fmt.Sprintf("%.0f objects/s", m.r.ObjectsPerS),
				target: "≥ 2000 objects/s", met: m.r.ObjectsPerS >= 2000, why: rate})
			if m.r.FloorS > 0 {
				goals = append(goals, seriesGoal{name: fmt.Sprintf("cold lock / list-and-watch floor at %d, %s", objects, m.mode), value: fmt.Sprintf("%.1f×", x),
					target: "≤ 3×", met: x <= 3, why: why})
			}
		}
		if u := r.Burst; u != nil && u.StartRequestsByResource != nil {
			reads := burstReads(r)
			goals = append(goals, seriesGoal{name: fmt.Sprintf("lists and scans in a burst at %d, a release namespace and type, on average", objects), value: fmt.Sprintf("%.2f", reads), target: "≤ 2", met: reads <= 2})
		}
	}
	if len(series) >= 2 {
		// The slope between the two largest rows leaves out the base,
		// which the smallest row's share of it would weigh.
		a, z := series[len(series)-2], series[len(series)-1]
		dn := float64(z.Params.Releases*z.Params.Objects - a.Params.Releases*a.Params.Objects)
		rss, heap := (z.RSSMiB-a.RSSMiB)*(1<<20)/dn, (z.HeapMiB-a.HeapMiB)*(1<<20)/dn
		goals = append(goals, seriesGoal{name: fmt.Sprintf("RSS per locked object, the slope from %d to %d (one untracked object each included)", a.Params.Releases*a.Params.Objects, z.Params.Releases*z.Params.Objects),
			value: fmt.Sprintf("%.0f bytes", rss), target: "≤ 1536 bytes", met: rss <= 1536,
			why: fmt.Sprintf("the live heap grows %.0f bytes a locked object between the two rows, and after a cold lock the heap keeps spans of its peak, garbage included, as holes (design-notes.md, the memory row)%s", heap, scrapedSlope(a, z, dn))})
	}
	for _, c := range []*statusChurnResult{top.StatusChurn, top.LabelChurn} {
		if c == nil {
			continue
		}
		what, whose := "status event", "status"
		if c.Labels {
			what, whose = "event of a label no chart declares", "label"
		}
		goals = append(goals,
			seriesGoal{name: "CPU per " + what, value: fmt.Sprintf("%.1f µs (a bare watcher: %.1f µs)", c.CPUPerEvent, c.FloorPerEvent), target: "≤ 20 µs", met: c.CPUPerEvent <= 20,
				why: fmt.Sprintf("a bare watcher that receives the same events and decodes none spends %.1f µs an event on this machine, %.1f× the target before the locker reads a byte; the locker spends %.1f µs more", c.FloorPerEvent, c.FloorPerEvent/20, c.CPUPerEvent-c.FloorPerEvent)},
			seriesGoal{name: "the locker's writes and drifts under " + whose + " churn", value: fmt.Sprintf("%.0f, %d", c.LockerWrites, c.Drifts), target: "0, 0", met: c.LockerWrites == 0 && c.Drifts == 0})
	}
	if m := top.MassDrift; m != nil {
		goals = append(goals,
			seriesGoal{name: "mass drift: last restored, after the drift, / floor", value: fmt.Sprintf("%.2f×, %d lost", m.RestoredS/m.FloorS, m.Lost), target: "≤ 1.5×, 0 lost", met: m.RestoredS/m.FloorS <= 1.5 && m.Lost == 0},
			seriesGoal{name: "mass drift: events and status writes", value: fmt.Sprintf("%.0f and %.0f for %d releases", m.Events, m.StatusWrites, m.Releases), target: "about one each per release", met: m.Events <= float64(3*m.Releases) && m.StatusWrites <= float64(3*m.Releases)})
	}
	return goals
}

// plotSeries draws the scale series: RSS and cold lock rate against the
// number of locked objects.
func plotSeries(path string, series []*scenarioResult) error {
	p := plot.New()
	p.Title.Text = "One replica: memory and cold lock against locked objects"
	p.X.Label.Text = "locked objects (and as many untracked)"
	p.Y.Label.Text = "RSS MiB; cold lock, hundreds of objects/s"
	var rss, rate plotter.XYs
	for _, r := range series {
		x := float64(r.Params.Releases * r.Params.Objects)
		rss = append(rss, plotter.XY{X: x, Y: r.RSSMiB})
		rate = append(rate, plotter.XY{X: x, Y: r.ObjectsPerS / 100})
	}
	for _, l := range []struct {
		name string
		xys  plotter.XYs
		c    color.RGBA
	}{
		{"RSS, MiB", rss, color.RGBA{R: 30, G: 100, B: 200, A: 255}},
		{"cold lock, 100 objects/s", rate, color.RGBA{R: 200, G: 60, B: 40, A: 255}},
	} {
		line, points, err := plotter.NewLinePoints(l.xys)
		if err != nil {
			return err
		}
		line.Color, points.Color = l.c, l.c
		line.Width = vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(l.name, line)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// plotLatency draws the cumulative distributions of the floor and of both
// revert measurements.
func plotLatency(path string, r *scenarioResult) error {
	p := plot.New()
	p.Title.Text = "Revert latency against the floor"
	p.X.Label.Text = "milliseconds"
	p.Y.Label.Text = "fraction of edits"
	for i, s := range []struct {
		name string
		d    distribution
		c    color.RGBA
	}{
		{"floor (PATCH + watch delivery)", r.Floor, color.RGBA{R: 30, G: 100, B: 200, A: 255}},
		{"single edits", r.Single, color.RGBA{R: 30, G: 100, B: 200, A: 255}},
		{"floor, concurrent", r.ConcurrentFloor, color.RGBA{R: 200, G: 60, B: 40, A: 255}},
		{"concurrent edits", r.Concurrent, color.RGBA{R: 200, G: 60, B: 40, A: 255}},
	} {
		if len(s.d.Samples) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(s.d.Samples))
		for j, v := range s.d.Samples {
			pts[j].X = v
			pts[j].Y = float64(j+1) / float64(len(s.d.Samples))
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = s.c
		line.Width = vg.Points(2)
		if i%2 == 0 {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(s.name, line)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// bytesWithin writes a slope in bytes with its 95% interval, where the
// run gives one.
func bytesWithin(v, plusMinus float64) string {
	if math.Round(plusMinus) == 0 {
		return fmt.Sprintf("%.0f bytes", v)
	}
	return fmt.Sprintf("%.0f ± %.0f bytes (95%%)", v, plusMinus)
}

// goal is one figure against its target and stretch goal. lower says
// smaller is better.
type goal struct {
	name            string
	value           float64
	target, stretch float64
	lower           bool
	format          string
	// plusMinus is the half width of the value's 95% interval, where
	// the run gives one: the value meets or misses a limit only if the
	// whole interval does.
	plusMinus float64
}

// targets writes each figure the project holds itself to, whether it meets
// its target, and how far it is from its stretch goal.
func targets(b *strings.Builder, rep *report) {
	d, r := rep.Derived, rep.Base
	goals := []goal{
		{"single revert p50 / floor p50", d.SingleP50xFloor, 1.5, 1.1, true, "%.2f×", 0},
		{"single revert p99 / floor p99", d.SingleP99xFloor, 3, 2, true, "%.2f×", 0},
		{"50 concurrent reverts p50 / floor p50", d.ConcurrentP50xFloor, 1.5, 1.1, true, "%.2f×", 0},
		{"50 concurrent reverts p99 / floor p99", d.ConcurrentP99xFloor, 3, 2, true, "%.2f×", 0},
		{"cold lock, objects/s", r.ObjectsPerS, 1000, 2000, false, "%.0f", 0},
		{"RSS per locked object, the larger slope, bytes", d.BytesPerLockedObject, 4096, 1536, true, "%.0f", d.BytesPerLockedObject95},
		{"RSS per untracked object, bytes", d.BytesPerUntrackedObject, 200, 100, true, "%.0f", d.BytesPerUntrackedObject95},
	}
	if m := rep.Small; m != nil {
		when := ""
		if rep.SmallDate != "" {
			when = fmt.Sprintf("; measured alone by -small-only on %s, %s", rep.SmallDate, rep.SmallLocker)
		}
		goals = append(goals, goal{fmt.Sprintf("RSS when quiet at %d locked objects (%.1f anonymous, %.1f file-backed%s), MiB", m.Params.Releases*m.Params.Objects, m.RSSAnonMiB, m.RSSFileMiB, when),
			m.RSSMiB, smallRSSTarget, smallRSSTarget, true, "%.1f", 0})
	}
	if t := rep.TwoWay; t != nil && len(t.Off) > 0 && len(t.Report) > 0 {
		median, _, _ := t.ratio()
		goals = append(goals, goal{"cold lock with Report on every release / Off (see Two-way locking)", median, 0.9, 0.9, false, "%.2f×", 0})
	}
	if c := r.Churn; c != nil {
		goals = append(goals, goal{"the locker's writes in answer to churn", c.LockerWrites, 0, 0, true, "%.0f", 0})
	}
	if c := r.ChurnDuring; c != nil {
		goals = append(goals, goal{"the same, through the latency measurement", c.LockerWrites, 0, 0, true, "%.0f", 0})
	}
	if c := r.ControllerChurn; c != nil {
		goals = append(goals, goal{"the locker's writes and drifts while the Deployment controller writes", c.LockerWrites + float64(c.Drifts), 0, 0, true, "%.0f", 0})
	}
	fmt.Fprintf(b, "## Targets\n\n| figure | measured | target | met | stretch goal | to the stretch goal |\n|---|---|---|---|---|---|\n")
	for _, g := range goals {
		f := func(v float64) string { return fmt.Sprintf(g.format, v) }
		met, distance := "no", "met"
		switch {
		case g.meets(g.target):
			met = "yes"
		case !g.misses(g.target):
			met = "cannot tell: within the run's noise"
		}
		switch {
		case g.meets(g.stretch):
		case g.misses(g.stretch):
			distance = fmt.Sprintf("%.2f× away", max(g.value/g.stretch, g.stretch/g.value))
		default:
			distance = "cannot tell"
		}
		value := "**" + f(g.value) + "**"
		if f(g.plusMinus) != f(0) {
			value += " ± " + f(g.plusMinus)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", g.name, value, f(g.target), met, f(g.stretch), distance)
	}
	fmt.Fprintf(b, "\n")
}

// meets says whether all of g's interval is within limit.
func (g goal) meets(limit float64) bool {
	if g.lower {
		return g.value+g.plusMinus <= limit
	}
	return g.value-g.plusMinus >= limit
}

// misses says whether all of g's interval is past limit.
func (g goal) misses(limit float64) bool {
	if g.lower {
		return g.value-g.plusMinus > limit
	}
	return g.value+g.plusMinus < limit
}

// coldLockTable is each row's cold lock in both start modes, against the
// floor measured on the same control plane right before each started.
func coldLockTable(b *strings.Builder, series []*scenarioResult) {
	fmt.Fprintf(b, "\nThe cold lock against its floor: a bare client that lists every object of the locked types in pages of 500, decoding each whole as a client-go informer does, and watches them, all types at once, measured right before the locker starts, on the same control plane (see e2e/cmd/bench/listfloor.go). CPU is the locker's, from its start to the end of the cold lock; reads in a burst are the lists and watches of the locked types (the informers' own included) for each release namespace and type; the memory is read once the cold lock is quiet and the locker idle, before the bench reads its /metrics, and RSS is split into anonymous and file-backed (the binary's) pages; the RSS five seconds after that read, whose garbage stays until the next collection, is beside it.\n\n")
	fmt.Fprintf(b, "| locked objects | floor s (objects read) | CRs before the start: cold lock s, objects/s, × floor, CPU s | CRs in a burst after it: cold lock s, objects/s, × floor, CPU s | burst: reads a namespace and type; GETs of locked objects a release | RSS MiB (anonymous + file) | RSS MiB after a /metrics read | live heap MiB | RSS over locked objects, bytes (the base included) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range series {
		n := r.Params.Releases * r.Params.Objects
		mode := func(m *scenarioResult) string {
			if m == nil {
				return "—"
			}
			x := "—"
			if m.FloorS > 0 {
				x = fmt.Sprintf("%.1f×", m.ColdLockS/m.FloorS)
			}
			return fmt.Sprintf("%.1f, %.0f, %s, %.1f", m.ColdLockS, m.ObjectsPerS, x, m.ColdLockCPUS)
		}
		burst := "—"
		if u := r.Burst; u != nil {
			burst = fmt.Sprintf("%.2f; %.2f", burstReads(r), u.StartLockedGets/float64(r.Params.Releases))
		}
		scraped := "—"
		if r.RSSScrapedMiB > 0 {
			scraped = fmt.Sprintf("%.0f", r.RSSScrapedMiB)
		}
		fmt.Fprintf(b, "| %d | %.2f (%d) | %s | %s | %s | %.0f (%.0f + %.0f) | %s | %.0f | %.0f |\n", n, r.FloorS, r.FloorObjects, mode(r), mode(r.Burst), burst,
			r.RSSMiB, r.RSSAnonMiB, r.RSSFileMiB, scraped, r.HeapMiB, r.RSSMiB*(1<<20)/float64(n))
	}
}

// scrapedSlope says, for the RSS goal, the slope of the RSS read five
// seconds after a read of /metrics between rows a and z, dn locked objects
// apart; "" when either row lacks it.
func scrapedSlope(a, z *scenarioResult, dn float64) string {
	if a.RSSScrapedMiB == 0 || z.RSSScrapedMiB == 0 {
		return ""
	}
	return fmt.Sprintf("; read five seconds after a read of the locker's /metrics, whose garbage stays until the next collection, it grows %.0f bytes", (z.RSSScrapedMiB-a.RSSScrapedMiB)*(1<<20)/dn)
}

// burstReads is how many lists and watches of the locked types the burst
// of r sent, on average, for each release namespace and type.
func burstReads(r *scenarioResult) float64 {
	reads := 0.0
	for _, gvr := range floorTypes {
		reads += r.Burst.StartRequestsByResource["list "+gvr.Resource] + r.Burst.StartRequestsByResource["watch "+gvr.Resource]
	}
	return reads / float64(r.Params.namespaces()*len(floorTypes))
}

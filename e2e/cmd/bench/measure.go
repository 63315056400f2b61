package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// locker is the helm-locker process under measurement.
type locker struct {
	*controlplane.Process
	start time.Time
}

func startLocker(bin, kubeconfig, log string, extra ...string) (*locker, error) {
	start := time.Now()
	p, err := controlplane.StartProcess("helm-locker", bin, append([]string{"--kubeconfig", kubeconfig, "--namespace", v1alpha1Namespace,
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--profiling", "--webhook-bind-address=0"}, extra...), log)
	if err != nil {
		return nil, err
	}
	return &locker{Process: p, start: start}, nil
}

// stop stops the locker, and with -profiles keeps its log there, named
// by the time it started: a figure out of line is read in its log.
func (l *locker) stop() {
	_ = l.Stop(10 * time.Second)
	if profiles == "" {
		return
	}
	if data, err := os.ReadFile(l.Log); err == nil {
		_ = os.WriteFile(filepath.Join(profiles, "locker-"+l.start.UTC().Format("150405")+".log"), data, 0o644)
	}
}

// termsLost counts the leader terms the locker lost, from its log. A lost
// term throws the caches away and locks everything afresh, standing by
// first: a cost no figure of a row may carry unsaid.
func (l *locker) termsLost() (*int, error) {
	data, err := os.ReadFile(l.Log)
	if err != nil {
		return nil, err
	}
	n := bytes.Count(data, []byte(`"Stopped leading`))
	if n > 0 {
		fmt.Fprintf(os.Stderr, "bench: the locker lost %d leader terms (its log is %s)\n", n, l.Log)
	}
	return &n, nil
}

// servingMetrics and servingProbes find the addresses the locker logged
// for its metrics and its health probes.
var (
	servingMetrics = regexp.MustCompile(`"Serving metrics".*? address="([^"]+)"`)
	servingProbes  = regexp.MustCompile(`"Serving health probes".*? address="([^"]+)"`)
)

// get asks the locker's metrics address for path.
func (l *locker) get(ctx context.Context, path string) (*http.Response, error) {
	return l.getFrom(ctx, servingMetrics, path)
}

// waitReady waits until the locker leads with its caches synced: its
// /readyz answers OK, and not as a replica standing by for the Lease,
// which is ready before it has read anything. CRs created then come after
// the start, as a burst does; created as soon as the probes answer, they
// would race the start's own declaring.
func (l *locker) waitReady(ctx context.Context) error {
	last := "no answer"
	for {
		resp, err := l.getFrom(ctx, servingProbes, "/readyz")
		if err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			if strings.Contains(string(body), "caches synced") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the locker was not ready: %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// getFrom asks the address that serving finds in the locker's log for path.
func (l *locker) getFrom(ctx context.Context, serving *regexp.Regexp, path string) (*http.Response, error) {
	log, err := os.ReadFile(l.Log)
	if err != nil {
		return nil, err
	}
	m := serving.FindSubmatch(log)
	if m == nil {
		return nil, fmt.Errorf("the locker's log does not say where it serves %s", path)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+string(m[1])+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("the locker answered %s to GET %s", resp.Status, path)
	}
	return resp, nil
}

// cpuProfile keeps a CPU profile of the locker's next seconds in file: its
// first ones for cold-lock work. It waits for the metrics address to be
// logged and gives up quietly if ctx ends first.
func (l *locker) cpuProfile(ctx context.Context, file string, seconds int) {
	for ctx.Err() == nil {
		resp, err := l.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds))
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			_ = os.WriteFile(file, data, 0o644)
		}
		return
	}
}

// apiServerProfile keeps a CPU profile of the API server's next seconds in
// file, beside the locker's: the two share the machine's cores, so a cold
// lock is as fast as the two together. The API server ends any request
// after a minute (--request-timeout), so a profile covers 55 s at most. It
// gives up quietly on error.
func apiServerProfile(ctx context.Context, kube kubernetes.Interface, file string, seconds int) {
	seconds = min(seconds, 55)
	data, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err == nil {
		_ = os.WriteFile(file, data, 0o644)
	}
}

// metrics reads the locker's own /metrics.
func (l *locker) metrics(ctx context.Context) ([]string, error) {
	resp, err := l.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// heap is the locker's live Go heap: the heap its /metrics reports right
// after a garbage collection, which asking for a heap profile with gc=1
// forces. Read without one, the figure includes garbage not yet collected,
// which varies by tens of MiB with the moment it is read. The profile is
// kept in profile, unless that is empty.
func (l *locker) heap(ctx context.Context, profile string) (int64, error) {
	resp, err := l.get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if profile != "" {
		if err := os.WriteFile(profile, data, 0o644); err != nil {
			return 0, err
		}
	}
	lines, err := l.metrics(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range lines {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("the locker's /metrics has no go_memstats_heap_alloc_bytes")
}

// writes counts the locker's requests that change something (POST, PATCH,
// DELETE), from client-go's request metrics on its /metrics. Lease
// renewals (PUT) are not counted.
func (l *locker) writes(ctx context.Context) (float64, error) {
	return l.sum(ctx, "rest_client_requests_total", func(labels string) bool {
		return strings.Contains(labels, `method="POST"`) || strings.Contains(labels, `method="PATCH"`) || strings.Contains(labels, `method="DELETE"`)
	})
}

// driftsOf sums the locker's helm_locker_drift_detected_total over kinds.
func (l *locker) driftsOf(ctx context.Context, kinds []string) (float64, error) {
	return l.sum(ctx, "helm_locker_drift_detected_total", func(labels string) bool {
		return slices.ContainsFunc(kinds, func(k string) bool { return strings.Contains(labels, `kind="`+k+`"`) })
	})
}

// sum adds up the series of metric on the locker's /metrics whose labels
// match.
func (l *locker) sum(ctx context.Context, metric string, match func(labels string) bool) (float64, error) {
	lines, err := l.metrics(ctx)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, line := range lines {
		labels, ok := strings.CutPrefix(line, metric+"{")
		if !ok || !match(labels) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// rss is the process's resident set, from /proc.
func (l *locker) rss() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", l.PID()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", l.PID())
}

// rssSplit is the process's resident set in MiB: anonymous pages, and
// file-backed ones, from /proc.
func (l *locker) rssSplit() (anon, file float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", l.PID()))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		for field, v := range map[string]*float64{"RssAnon": &anon, "RssFile": &file} {
			if rest, ok := strings.CutPrefix(line, field+":"); ok {
				kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
				if err != nil {
					return 0, 0, fmt.Errorf("%s of pid %d: %w", field, l.PID(), err)
				}
				*v = kb / 1024
			}
		}
	}
	return anon, file, nil
}

// memory says where the locker's resident set is, in MiB: anonymous and
// file-backed (the binary's pages) from /proc, and the Go runtime's
// account of the heap's spans (in use, and free but not yet given back),
// stacks and its own structures, from /metrics. Read right after heap's
// collection, spans in use beyond the live heap are fragmentation.
func (l *locker) memory(ctx context.Context) string {
	var b strings.Builder
	if anon, file, err := l.rssSplit(); err == nil {
		fmt.Fprintf(&b, "RssAnon %.1f, RssFile %.1f, ", anon, file)
	}
	lines, err := l.metrics(ctx)
	if err != nil {
		return b.String() + err.Error()
	}
	stats := map[string]float64{}
	for _, line := range lines {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "go_memstats_") {
			stats[strings.TrimPrefix(name, "go_memstats_")], _ = strconv.ParseFloat(v, 64)
		}
	}
	mib := func(v float64) float64 { return v / (1 << 20) }
	fmt.Fprintf(&b, "heap spans in use %.1f, free and kept %.1f, stacks %.1f, runtime %.1f (spans %.1f, GC %.1f, other %.1f)",
		mib(stats["heap_inuse_bytes"]), mib(stats["heap_idle_bytes"]-stats["heap_released_bytes"]), mib(stats["stack_inuse_bytes"]),
		mib(stats["mspan_inuse_bytes"]+stats["gc_sys_bytes"]+stats["other_sys_bytes"]+stats["mcache_inuse_bytes"]+stats["buck_hash_sys_bytes"]),
		mib(stats["mspan_inuse_bytes"]), mib(stats["gc_sys_bytes"]), mib(stats["other_sys_bytes"]))
	return b.String()
}

// cpu is the process's user plus system time.
func (l *locker) cpu() (time.Duration, error) { return processCPU(l.PID()) }

// processCPU is the user and system CPU pid has used, from /proc.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

// configMapWatch follows every ConfigMap with a given label and tells when
// an object reached a value at a resourceVersion after a given one.
type configMapWatch struct {
	mu      sync.Mutex
	last    map[string]observed
	waiters map[string][]*waiter
}

type observed struct {
	rv    int64
	value string
	at    time.Time
}

type waiter struct {
	afterRV int64
	value   string
	done    chan time.Time
}

func watchConfigMaps(ctx context.Context, dyn dynamic.Interface, namespace, selector string) (*configMapWatch, error) {
	res := dyn.Resource(cmGVR).Namespace(namespace)
	// Start from now rather than from a synthetic ADDED event per existing
	// object.
	list, err := res.List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
	if err != nil {
		return nil, err
	}
	rv := list.GetResourceVersion()
	w, err := res.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return nil, err
	}
	cw := &configMapWatch{last: map[string]observed{}, waiters: map[string][]*waiter{}}
	go func() {
		for {
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = obj.GetResourceVersion()
				if ev.Type == watch.Modified || ev.Type == watch.Added {
					cw.observe(obj, time.Now())
				}
			}
			// The API server ends watches now and then; carry on
			// from the last version seen, so no event is missed.
			if ctx.Err() != nil {
				return
			}
			for {
				w, err = res.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
				if err == nil || ctx.Err() != nil {
					break
				}
				fmt.Fprintln(os.Stderr, "bench: re-watching ConfigMaps:", err)
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				return
			}
		}
	}()
	return cw, nil
}

func (cw *configMapWatch) observe(obj *unstructured.Unstructured, now time.Time) {
	rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	value, _, _ := unstructured.NestedString(obj.Object, "data", "key")
	key := obj.GetNamespace() + "/" + obj.GetName()
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.last[key] = observed{rv: rv, value: value, at: now}
	kept := cw.waiters[key][:0]
	for _, wt := range cw.waiters[key] {
		if rv > wt.afterRV && value == wt.value {
			wt.done <- now
		} else {
			kept = append(kept, wt)
		}
	}
	cw.waiters[key] = kept
}

// lastRV is the resourceVersion of the last event seen for key.
func (cw *configMapWatch) lastRV(key string) int64 {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.last[key].rv
}

// wait returns a channel that receives the time an event showed key at
// value with a resourceVersion after afterRV, including an event that
// arrived before wait was called.
func (cw *configMapWatch) wait(key, value string, afterRV int64) <-chan time.Time {
	wt := &waiter{afterRV: afterRV, value: value, done: make(chan time.Time, 1)}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if last, ok := cw.last[key]; ok && last.rv > afterRV && last.value == value {
		wt.done <- last.at
		return wt.done
	}
	cw.waiters[key] = append(cw.waiters[key], wt)
	return wt.done
}

// edit patches data.key and returns when the request was sent, when its
// response arrived, and the resourceVersion it produced.
func edit(ctx context.Context, dyn dynamic.Interface, r ref, value string) (sent, answered time.Time, rv int64, err error) {
	patch := fmt.Appendf(nil, `{"data":{"key":%q}}`, value)
	sent = time.Now()
	out, err := dyn.Resource(cmGVR).Namespace(r.ns).Patch(ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-edit"})
	answered = time.Now()
	if err != nil {
		return sent, answered, 0, err
	}
	rv, _ = strconv.ParseInt(out.GetResourceVersion(), 10, 64)
	return sent, answered, rv, nil
}

// waitDeployed waits until every HelmRelease CR says Deployed. It lists
// once and then watches: polling lists of 200 CRs with their status would
// load the API server the locker is being timed against.
func waitDeployed(ctx context.Context, dyn dynamic.Interface, want int) (time.Time, error) {
	crs := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace)
	deployed := map[string]bool{}
	count := func() int {
		n := 0
		for _, ok := range deployed {
			if ok {
				n++
			}
		}
		return n
	}
	isDeployed := func(u *unstructured.Unstructured) bool {
		s, _, _ := unstructured.NestedString(u.Object, "status", "state")
		return s == string(v1alpha1.StateDeployed)
	}
	for {
		list, err := crs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return time.Time{}, err
		}
		clear(deployed)
		for i := range list.Items {
			deployed[list.Items[i].GetName()] = isDeployed(&list.Items[i])
		}
		if count() == want {
			return time.Now(), nil
		}
		w, err := crs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			return time.Time{}, err
		}
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue // an error event: the watch ends, and is listed again
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				deployed[u.GetName()] = isDeployed(u)
			case watch.Deleted:
				delete(deployed, u.GetName())
			}
			if count() == want {
				w.Stop()
				return time.Now(), nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%d of %d HelmReleases Deployed: %w", count(), want, ctx.Err())
		}
	}
}

// requestCounts reads apiserver_request_total by label set: every request
// the API server has answered, by verb, resource and code.
func requestCounts(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	data, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[string]float64{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			counts[line[len("apiserver_request_total"):i]] = v
		}
	}
	return counts, nil
}

// requestsByMethod is the locker's own count of the requests it sent, by
// HTTP method (a watch is a GET).
func (l *locker) requestsByMethod(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		n, err := l.sum(ctx, "rest_client_requests_total", func(labels string) bool { return strings.Contains(labels, `method="`+method+`"`) })
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out[method] = n
		}
	}
	return out, nil
}

// startRequests records what the locker's start cost in requests, by its
// own client's count, and prints what the API server served meanwhile by
// verb and resource (the bench's own polling included), to tell where a
// figure comes from.
func startRequests(ctx context.Context, l *locker, res *scenarioResult, apiBefore map[string]float64, kube kubernetes.Interface, dir string, audited int64) error {
	byMethod, err := l.requestsByMethod(ctx)
	if err != nil {
		return err
	}
	res.StartRequestsByMethod = byMethod
	for _, n := range byMethod {
		res.StartRequests += n
	}
	if res.StartRequestsByResource, res.StartLockedGets, err = requestsByResource(dir, audited); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: start: by verb and resource %v; GETs of locked objects %.0f\n", res.StartRequestsByResource, res.StartLockedGets)
	after, err := requestCounts(ctx, kube)
	if err != nil {
		return err
	}
	printServed("start", apiBefore, after)
	fmt.Fprintf(os.Stderr, "bench: start: the locker sent %.0f requests %v\n", res.StartRequests, res.StartRequestsByMethod)
	return nil
}

// printServed prints, by resource and verb, what the API server served
// between two of its request counts, to tell where a figure comes from.
func printServed(what string, before, after map[string]float64) {
	byVerb := map[string]float64{}
	verbResource := regexp.MustCompile(`(resource|verb)="([^"]*)"`)
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			key := ""
			for _, m := range verbResource.FindAllStringSubmatch(k, -1) {
				key += m[2] + " "
			}
			byVerb[key] += d
		}
	}
	for k, v := range byVerb {
		if v >= 10 {
			fmt.Fprintf(os.Stderr, "bench: %s: the API server served %.0f × %s\n", what, v, k)
		}
	}
}

// distribution summarises latency samples.
type distribution struct {
	Count    int     `json:"count"`
	Timeouts int     `json:"timeouts"`
	P50      float64 `json:"p50Ms"`
	P90      float64 `json:"p90Ms"`
	P99      float64 `json:"p99Ms"`
	Max      float64 `json:"maxMs"`
	// Samples are every measured latency in ms, sorted, so that the plot
	// can be drawn again from the JSON (bench -render).
	Samples []float64 `json:"samplesMs,omitempty"`
	// slowest are the longest samples with when they began, for the log.
	slowest []timedSample
}

func summarize(samples []time.Duration, timeouts int) distribution {
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	d := distribution{Count: len(samples), Timeouts: timeouts}
	if len(samples) == 0 {
		return d
	}
	for _, v := range samples {
		d.Samples = append(d.Samples, ms(v))
	}
	q := func(p float64) float64 {
		i := int(p * float64(len(samples)-1))
		return ms(samples[i])
	}
	d.P50, d.P90, d.P99, d.Max = q(0.50), q(0.90), q(0.99), ms(samples[len(samples)-1])
	return d
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

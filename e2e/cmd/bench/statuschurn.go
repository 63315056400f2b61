package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// statusChurnResult is what the locker spent while other controllers
// wrote the status of locked Deployments, or labels of their own on them,
// which change nothing a lock holds: the commonest events on a busy
// cluster.
type statusChurnResult struct {
	// Labels is set for label writes, where status writes are the rest.
	Labels      bool    `json:"labels,omitempty"`
	Deployments int     `json:"deployments"`
	Writes      int64   `json:"statusWrites"`
	Seconds     float64 `json:"seconds"`
	// TargetPerS is the rate the writers aimed at; WritesPerS what the
	// API server took.
	TargetPerS float64 `json:"targetWritesPerSecond"`
	WritesPerS float64 `json:"writesPerSecond"`
	// LockerCPUS is the locker's CPU over the window, less its idle CPU
	// over a window as long, measured just before.
	LockerCPUS   float64 `json:"lockerCpuSeconds"`
	IdleCPUS     float64 `json:"idleCpuSeconds"`
	CPUPerEvent  float64 `json:"cpuMicrosecondsPerEvent"`
	Cores        float64 `json:"lockerCores"`
	LockerWrites float64 `json:"lockerWrites"`
	// ControllerWrites are the Deployment controller's status writes
	// over the window: events too, which the per-event figures count.
	// The churn writes a condition of its own, which the controller
	// keeps as it is, so that it has nothing to write back.
	ControllerWrites float64 `json:"controllerWrites"`
	Drifts           int64   `json:"driftsDetected"`
	// FloorCPUS is the CPU of a bare watcher of the same Deployments over
	// the same window, less its idle CPU, and FloorPerEvent that per
	// event (see runWatchFloor).
	FloorCPUS     float64 `json:"watchFloorCpuSeconds"`
	FloorPerEvent float64 `json:"watchFloorMicrosecondsPerEvent"`
}

// statusChurn writes the status of every locked Deployment, round and
// round, at up to target writes a second for window, and reads the
// locker's CPU from /proc before and after. Each write changes a condition
// of the churn's own in the status, so every one is a watch event; the
// Deployment controller keeps a condition it does not know, where it would
// write back replica counts. With labels, each write changes a label no
// chart declares instead, as a controller that marks objects does.
func statusChurn(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, l *locker, kubeconfig, dir string, p params, target float64, window time.Duration, labels bool) (*statusChurnResult, error) {
	var deployments []objectRef
	for _, r := range releaseRefs(p) {
		if r.gvr == deployGVR {
			deployments = append(deployments, r)
		}
	}
	if len(deployments) == 0 {
		return nil, nil
	}
	res := &statusChurnResult{Labels: labels, Deployments: len(deployments), TargetPerS: target, Seconds: window.Seconds()}
	floor, err := startWatchFloor(ctx, kubeconfig, dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = floor.Stop(5 * time.Second) }()
	// both reads the locker's CPU and the bare watcher's at one moment.
	both := func() (locker, bare time.Duration, err error) {
		if locker, err = l.cpu(); err != nil {
			return 0, 0, err
		}
		bare, err = floor.cpu()
		return locker, bare, err
	}
	idle0, floorIdle0, err := both()
	if err != nil {
		return nil, err
	}
	time.Sleep(window)
	idle1, floorIdle1, err := both()
	if err != nil {
		return nil, err
	}
	res.IdleCPUS = (idle1 - idle0).Seconds()

	writes0, drifts0, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	served0, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	cpu0, floor0, err := both()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	if profiles != "" {
		what := "status"
		if labels {
			what = "label"
		}
		go l.cpuProfile(ctx, filepath.Join(profiles, fmt.Sprintf("cpu-%schurn-N%d-M%d.pprof", what, p.Releases, p.Objects)), int(window.Seconds())-1)
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / target))
	defer tick.Stop()
	var done atomic.Int64
	var failed atomic.Value
	work := make(chan int, 64)
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for i := range work {
				r := deployments[i%len(deployments)]
				round := 1 + i/len(deployments)%7
				// A strategic merge patch merges conditions by type,
				// leaving the controller's own.
				patch, kind, manager, sub := fmt.Sprintf(`{"status":{"conditions":[{"type":"status-churn.example.com/Round","status":"True","reason":"Round","message":"round %d"}]}}`, round),
					types.StrategicMergePatchType, "status-churn", []string{"status"}
				if labels {
					patch, kind, manager, sub = fmt.Sprintf(`{"metadata":{"labels":{"costs.example.com/round":"%d"}}}`, round), types.MergePatchType, "cost-labeller", nil
				}
				_, err := dyn.Resource(r.gvr).Namespace(r.ns).Patch(ctx, r.name, kind, []byte(patch), metav1.PatchOptions{FieldManager: manager}, sub...)
				if err != nil {
					failed.Store(fmt.Errorf("writing %s/%s: %w", r.ns, r.name, err))
					continue
				}
				done.Add(1)
			}
		})
	}
	for i := 0; wctx.Err() == nil; i++ {
		select {
		case <-tick.C:
		case <-wctx.Done():
		}
		select {
		case work <- i:
		default: // the writers are behind: this tick is not sent
		}
	}
	close(work)
	wg.Wait()
	cpu1, floor1, err := both()
	if err != nil {
		return nil, err
	}
	if err, ok := failed.Load().(error); ok {
		return nil, err
	}
	served1, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	res.ControllerWrites = controllerStatusWrites(served0, served1)
	// Drift is recorded up to 2 s later (see bookkeepingDelay).
	time.Sleep(3 * time.Second)
	writes1, drifts1, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	res.Writes = done.Load()
	res.WritesPerS = float64(res.Writes) / window.Seconds()
	res.LockerCPUS = (cpu1 - cpu0).Seconds() - res.IdleCPUS
	res.Cores = res.LockerCPUS / window.Seconds()
	res.FloorCPUS = (floor1 - floor0 - (floorIdle1 - floorIdle0)).Seconds()
	if events := float64(res.Writes) + res.ControllerWrites; events > 0 {
		res.CPUPerEvent = res.LockerCPUS / events * 1e6
		res.FloorPerEvent = res.FloorCPUS / events * 1e6
	}
	res.LockerWrites = writes1 - writes0
	res.Drifts = drifts1 - drifts0
	what := "status"
	if labels {
		what = "label"
	}
	fmt.Fprintf(os.Stderr, "bench: %s churn: %d writes in %s (%.0f/s of %.0f/s aimed), the locker's CPU %.2f s (idle %.2f s): %.1f µs an event, %.3f cores; a bare watcher's %.1f µs an event; %.0f writes, %d drifts; the Deployment controller's status writes %.0f\n",
		what, res.Writes, window, res.WritesPerS, target, res.LockerCPUS, res.IdleCPUS, res.CPUPerEvent, res.Cores, res.FloorPerEvent, res.LockerWrites, res.Drifts, res.ControllerWrites)
	return res, nil
}

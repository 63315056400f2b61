package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// measureColdLocks runs the cold lock of p rounds times for each of
// binaries, in turns, on one control plane: a change to the cold lock
// then reads against the noise in a few minutes, each binary meeting the
// same API server and the same etcd history. Before each cold lock every
// CR loses its claim and status, so each is a first start, as the one a
// scenario measures is.
func measureColdLocks(ctx context.Context, p params, binaries []string, rounds int) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	for i, b := range binaries {
		if binaries[i], err = filepath.Abs(b); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return err
	}
	defer stop()
	locked, err := setup(ctx, env.kube, env.dyn, p)
	if err != nil {
		return err
	}
	if err := settle(ctx, env.kube); err != nil {
		return err
	}
	restored, err := watchConfigMaps(ctx, env.dyn, metav1.NamespaceAll, "app.kubernetes.io/managed-by=Helm")
	if err != nil {
		return err
	}
	baseline, err := requestRate(ctx, env.kube, 30*time.Second)
	if err != nil {
		return err
	}
	// The phases are read from the locker's log, at -v=2.
	lockerArgs = append(lockerArgs, "--v=2")
	times := make([][]float64, len(binaries))
	for round := range rounds {
		for i, bin := range binaries {
			if err := unclaimAll(ctx, env.dyn); err != nil {
				return err
			}
			if err := waitQuiet(ctx, env.kube, baseline); err != nil {
				return err
			}
			res := &scenarioResult{Params: p}
			l, err := coldLock(ctx, env, restored, locked, bin, p, baseline, res, nil, nil)
			if err != nil {
				return err
			}
			cpu, _ := l.cpu()
			l.stop()
			times[i] = append(times[i], res.ColdLockS)
			fmt.Printf("round %d, %s: cold lock %.2f s (%.0f objects/s; %s), the locker's CPU by the end of its first quiet %.2f s, %.0f requests at start, RSS then %.1f MiB, live heap %.1f MiB\n",
				round+1, bin, res.ColdLockS, res.ObjectsPerS, phases(l.Log, res.ColdLockS), cpu.Seconds(), res.StartRequests, res.RSSMiB, res.HeapMiB)
		}
	}
	for i, bin := range binaries {
		sorted := slices.Sorted(slices.Values(times[i]))
		fmt.Printf("%s: cold lock median %.2f s of %s\n", bin, sorted[len(sorted)/2], strings.Trim(fmt.Sprint(times[i]), "[]"))
	}
	return nil
}

// unclaimAll takes every HelmRelease's claim and status away, as if no
// locker had ever served it.
func unclaimAll(ctx context.Context, dyn dynamic.Interface) error {
	crs := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace)
	list, err := crs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	unclaim := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, v1alpha1.ManagedByAnnotation)
	for _, cr := range list.Items {
		if _, err := crs.Patch(ctx, cr.GetName(), types.MergePatchType, unclaim, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("unclaiming %s: %w", cr.GetName(), err)
		}
		if _, err := crs.Patch(ctx, cr.GetName(), types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("clearing the status of %s: %w", cr.GetName(), err)
		}
	}
	return nil
}

// coldLockPhases are the messages of the locker's log that end each phase
// of a cold lock, in order, and the phases' names.
var coldLockPhases = []struct{ msg, name string }{
	{"Starting helm-locker", ""},
	{"Waiting for caches to sync", "lead"},
	{"Declared the releases", "caches and declare"},
	{"Starting workers", "prepare"},
	{"Informers synced", "list"},
}

// phases reads how long each phase of the cold lock took from the
// locker's log. The last, until every CR said Deployed and every drifted
// ConfigMap was restored, ends coldLockS after the bench started the
// process, which includes the few milliseconds before its first line.
func phases(logFile string, coldLockS float64) string {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return err.Error()
	}
	var out []string
	var first, last time.Time
	for i, p := range coldLockPhases {
		at, ok := logged(data, p.msg)
		if !ok {
			return fmt.Sprintf("the log has no %q", p.msg)
		}
		if i == 0 {
			first = at
		} else {
			out = append(out, fmt.Sprintf("%s %.2f s", p.name, at.Sub(last).Seconds()))
		}
		last = at
	}
	out = append(out, fmt.Sprintf("sync %.2f s", coldLockS-last.Sub(first).Seconds()))
	return strings.Join(out, ", ")
}

// logged returns the time of the first line of a klog log that holds
// "msg", by its time of day.
func logged(data []byte, msg string) (time.Time, bool) {
	for line := range strings.Lines(string(data)) {
		if !strings.Contains(line, `"`+msg+`"`) {
			continue
		}
		// I1126 02:09:04.759338    4909 controller.go:310] "..."
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return time.Time{}, false
		}
		at, err := time.Parse("15:04:05.000000", fields[1])
		return at, err == nil
	}
	return time.Time{}, false
}

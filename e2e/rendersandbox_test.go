package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestRenderSandbox: each render of a chart runs in a process of its own,
// which the locker stops. A locker started with --render-timeout=15s
// renders two releases of the sharded chart, whose tuning ConfigMap (read
// through lookup) then asks one to count the pairs of 100,000 shards (ten
// billion loops) and the other to double its padding 40 times (a TiB):
//   - the first says Rendered=False, reason RenderTimeout, within the
//     deadline and a few seconds; the second RenderTooLarge;
//   - meanwhile, a third release's lookup change is reported
//     (ClusterChanged), and an edit of a fourth's object is reverted
//     within 7.5 s, half the render deadline: renders never hold up a
//     revert;
//   - the locker's peak resident set stays under 512 MiB, and no render's
//     process outlives its render;
//   - `diff --rerender` stops the same render at its own (default) 10 s;
//   - tuned back, each renders as stored again: a stopped render keeps the
//     chart's lookups watched, and a change of one is the next trigger.
//
// Rendered in the locker's own process, the loop would hold a render
// worker for hours and the growth would take the locker past its memory.
func TestRenderSandbox(t *testing.T) {
	t.Parallel()
	// Long enough that on a busy machine the growing render meets its
	// memory cap before its deadline: at 10 s, with two busy loops beside
	// make test-e2e on 2 cores, it once did not.
	const renderTimeout = 15 * time.Second
	registration := env.Namespace(t)
	locker, err := env.StartLockerWith("render-sandbox", env.CP.Kubeconfig, "--namespace", registration, "--render-timeout="+renderTimeout.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(framework.LogTail(locker, 60))
		}
		_ = locker.Stop(10 * time.Second)
	})
	install := func(v framework.HelmVersion, chart string, rerender v1alpha1.Rerender, prepare func(ns string)) (ns, cr string) {
		t.Helper()
		ns = env.Namespace(t)
		env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
		env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
		if prepare != nil {
			prepare(ns)
		}
		env.Helm(t, v, "install", "app", framework.Chart(t, chart), "-n", ns)
		cr = env.RegisterWith(t, registration, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": string(rerender)})
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
		return ns, cr
	}
	rendered := func(cr string, timeout time.Duration, status metav1.ConditionStatus, reason string, contains ...string) {
		t.Helper()
		env.Eventually(t, timeout, func() error {
			c := findCondition(env.HelmReleaseIn(t, registration, cr), v1alpha1.ConditionRendered)
			if c == nil || c.Status != status || c.Reason != reason {
				return fmt.Errorf("HelmRelease %s Rendered = %+v, want %s/%s", cr, c, status, reason)
			}
			for _, s := range contains {
				if !strings.Contains(c.Message, s) {
					return fmt.Errorf("HelmRelease %s Rendered message %q lacks %q", cr, c.Message, s)
				}
			}
			return nil
		})
	}

	loopNS, loopCR := install(framework.Helm3, "sharded", v1alpha1.RerenderReport, nil)
	growNS, growCR := install(framework.Helm4, "sharded", v1alpha1.RerenderReport, nil)
	lookupNS, lookupCR := install(framework.Helm4, "two-way", v1alpha1.RerenderReport, func(ns string) { setGreeting(t, ns, "hello") })
	editNS, _ := install(framework.Helm4, "configmaps", v1alpha1.RerenderOff, nil)
	for _, cr := range []string{loopCR, growCR, lookupCR} {
		rendered(cr, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
	}

	start := time.Now()
	setTuning(t, loopNS, "shards", "100000")
	setTuning(t, growNS, "padding", "40")
	setGreeting(t, lookupNS, "bonjour")
	setKey(t, editNS, "app-0", "drifted")
	env.Eventually(t, renderTimeout/2, func() error {
		if got, _ := keyOf(t, editNS, "app-0"); got != "declared" {
			return fmt.Errorf("ConfigMap %s/app-0 data.key = %q while two renders run away, want it reverted to %q", editNS, got, "declared")
		}
		return nil
	})
	reverted := time.Since(start)

	rendered(loopCR, renderTimeout+5*time.Second-time.Since(start), metav1.ConditionFalse, v1alpha1.ReasonRenderTimeout,
		"ran longer than "+renderTimeout.String()+" and was stopped (--render-timeout), after it looked up ConfigMap "+loopNS+"/tuning")
	stopped := time.Since(start)
	rendered(growCR, 10*time.Second, metav1.ConditionFalse, v1alpha1.ReasonRenderTooLarge,
		"took more than its 256 MiB of memory and was stopped", "after it looked up ConfigMap "+growNS+"/tuning")
	rendered(lookupCR, 15*time.Second, metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, "lookup of ConfigMap "+lookupNS+"/settings changed")
	t.Logf("edit reverted after %s; loop stopped, and reported, after %s", reverted.Round(time.Millisecond), stopped.Round(time.Millisecond))

	env.Eventually(t, 5*time.Second, func() error {
		if left := renderProcesses(t, locker.PID()); len(left) > 0 {
			return fmt.Errorf("render processes of the locker still running, its renders over: %v", left)
		}
		return nil
	})

	// The CLI renders in the same sandbox, at its default deadline.
	cliStart := time.Now()
	res := env.CLI(t, "", "diff", "--rerender", "-n", loopNS, "app", "--lock-namespace", registration)
	if res.Code != 2 || !strings.Contains(res.Stderr, "ran longer than 10s and was stopped") {
		t.Errorf("diff --rerender of the looping chart: exit %d, stderr %q; want 2, its render stopped at 10s", res.Code, res.Stderr)
	}
	if took := time.Since(cliStart); took > 20*time.Second {
		t.Errorf("diff --rerender of the looping chart took %s", took)
	}

	// Tuned back, the charts render as stored: the next trigger is a
	// change of what the stopped renders looked up.
	setTuning(t, loopNS, "shards", "2")
	setTuning(t, growNS, "padding", "0")
	rendered(loopCR, 15*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
	rendered(growCR, 15*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)

	peak := peakRSS(t, locker.PID()) // VmHWM
	t.Logf("the locker's peak resident set: %d MiB", peak>>20)
	if peak >= 512<<20 {
		t.Errorf("the locker's peak resident set was %d MiB, want under 512 MiB", peak>>20)
	}
}

// setTuning sets data[key] of the sharded chart's tuning ConfigMap in ns,
// creating it.
func setTuning(t *testing.T, ns, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"tuning"},"data":{%q:%q}}`, key, value)
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), "tuning", types.ApplyPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e-tuning", Force: new(true)}); err != nil {
		t.Fatal(err)
	}
}

// renderProcesses are the render processes (helm-locker render-sandbox)
// whose parent is pid.
func renderProcesses(t *testing.T, pid int) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := strconv.Itoa(pid)
	var out []string
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != parent {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); strings.Contains(string(cmdline), "render-sandbox") {
			out = append(out, e.Name())
		}
	}
	return out
}

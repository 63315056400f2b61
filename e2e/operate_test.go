package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

var deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// waitForCondition waits until the CR has condition typ with status.
func waitForCondition(t *testing.T, cr, typ string, status metav1.ConditionStatus) *v1alpha1.HelmRelease {
	t.Helper()
	var hr *v1alpha1.HelmRelease
	env.Eventually(t, 60*time.Second, func() error {
		hr = env.HelmRelease(t, cr)
		if c := findCondition(hr, typ); c == nil || c.Status != status {
			return fmt.Errorf("HelmRelease %s: condition %s = %+v, want %s", cr, typ, c, status)
		}
		return nil
	})
	return hr
}

// waitForEvent waits for an event with reason on the CR whose message
// contains every one of parts, and returns it.
func waitForEvent(t *testing.T, cr, reason string, parts ...string) string {
	t.Helper()
	var found string
	env.Eventually(t, 30*time.Second, func() error {
		var seen []string
		for _, ev := range env.Events(t, framework.RegistrationNamespace, cr) {
			if ev.Reason != reason {
				continue
			}
			seen = append(seen, ev.Message)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(ev.Message, p)
			}
			if ok {
				found = ev.Message
				return nil
			}
		}
		return fmt.Errorf("no %s event on %s mentions %q; seen %q", reason, cr, parts, seen)
	})
	return found
}

func managers(obj *unstructured.Unstructured) []string {
	var out []string
	for _, f := range obj.GetManagedFields() {
		out = append(out, f.Manager)
	}
	return out
}

// TestWarnModeNeverWrites registers a release in Warn mode: an edit and a
// deletion are reported (condition, status, event) and left alone, and the
// locker's field manager never appears on the objects.
func TestWarnModeNeverWrites(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "cms", map[string]any{"mode": "Warn"})
	hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "WarnMode" {
		t.Errorf("Locked condition in Warn mode = %+v, want False/WarnMode", c)
	}

	editStays(t, ns, "cms-0", "edited", "Warn mode never writes")
	hr = waitForCondition(t, cr, v1alpha1.ConditionDrifted, metav1.ConditionTrue)
	if d := hr.Status.LastDrift; d == nil || d.Object != "ConfigMap "+ns+"/cms-0" || d.Corrected || !cmp.Equal(d.Paths, []string{"/data/key"}) {
		t.Errorf("status.lastDrift = %+v, want the uncorrected edit of /data/key of cms-0", d)
	}
	waitForEvent(t, cr, "DriftDetected", "ConfigMap "+ns+"/cms-0", "/data/key", "kubectl-edit")

	if err := env.Dynamic.Resource(configMaps).Namespace(ns).Delete(t.Context(), "cms-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, cr, "DriftDetected", "ConfigMap "+ns+"/cms-1 was deleted")
	env.Consistently(t, time.Second, func() error {
		if _, ok := keyOf(t, ns, "cms-1"); ok {
			return fmt.Errorf("Warn mode recreated the deleted ConfigMap %s/cms-1", ns)
		}
		return nil
	})
	for _, m := range managers(env.Get(t, "v1", "configmaps", ns, "cms-0")) {
		if m == "helm-locker" {
			t.Errorf("Warn mode wrote to cms-0: managedFields name %v", managers(env.Get(t, "v1", "configmaps", ns, "cms-0")))
		}
	}
	if got := env.HelmRelease(t, cr).Status.DriftsCorrected; got != 0 {
		t.Errorf("status.driftsCorrected = %d in Warn mode, want 0", got)
	}
}

// TestIgnoreRuleLetsScaleSurvive ignores /spec/replicas of the Deployment
// of the chart `helm create` makes: a scale stays, while an image change
// made at the same time is reverted.
func TestIgnoreRuleLetsScaleSurvive(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	chart := env.CreateChart(t, "web")
	env.Helm(t, framework.Helm4, "install", "demo", chart, "-n", ns)
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "demo", map[string]any{
		"ignore": []any{map[string]any{"paths": []any{"/spec/replicas"}, "target": map[string]any{"kind": "Deployment", "name": "demo-.*"}}},
	})
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	name := "demo-web"
	declaredImage := containerImage(t, ns, name)
	patch := `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","image":"busybox:drifted"}]}}}}`
	if _, err := env.Dynamic.Resource(deployments).Namespace(ns).Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "hpa-like"}); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 30*time.Second, func() error {
		if got := containerImage(t, ns, name); got != declaredImage {
			return fmt.Errorf("image %q, want it reverted to %q", got, declaredImage)
		}
		return nil
	})
	env.Consistently(t, 1500*time.Millisecond, func() error {
		d := env.Get(t, "apps/v1", "deployments", ns, name)
		if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
			return fmt.Errorf("replicas = %d, want the ignored scale to 3 to stay", r)
		}
		return nil
	})
}

func containerImage(t *testing.T, ns, name string) string {
	t.Helper()
	d := env.Get(t, "apps/v1", "deployments", ns, name)
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("Deployment %s/%s has no containers", ns, name)
	}
	image, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	return image
}

// TestSuspendAndResume suspends a lock: the state says so, an edit stays;
// resuming re-locks at once and reverts that edit.
func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm3, ns, "cms", 1)
	waitForEvent(t, cr, "Locked", "all 1 objects of revision 1 are held")
	setSuspend := func(v bool) {
		patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, v)
		if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), cr, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setSuspend(true)
	hr := env.WaitForState(t, cr, v1alpha1.StateSuspended, 0)
	if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Suspended" {
		t.Errorf("Locked condition while suspended = %+v, want False/Suspended", c)
	}
	waitForEvent(t, cr, "Unlocked", "spec.suspend")
	editStays(t, ns, "cms-0", "while suspended", "the lock is suspended")

	setSuspend(false)
	waitForKey(t, ns, "cms-0", "declared")
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
}

// TestAttributionNamesKubectlPatch edits a locked ConfigMap with `kubectl
// patch`; the events and the status name kubectl-patch, the path and the
// object.
func TestAttributionNamesKubectlPatch(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm4, ns, "cms", 1)
	env.Kubectl(t, "patch", "configmap", "cms-0", "-n", ns, "--type=merge", "-p", `{"data":{"key":"patched"}}`)
	waitForKey(t, ns, "cms-0", "declared")
	waitForEvent(t, cr, "DriftCorrected", "ConfigMap "+ns+"/cms-0", "/data/key", "kubectl-patch (Update at ")
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmRelease(t, cr)
		d := hr.Status.LastDrift
		if d == nil || !d.Corrected || len(d.Managers) != 1 || d.Managers[0].Manager != "kubectl-patch" || d.Managers[0].Operation != "Update" || d.Managers[0].Time == nil {
			return fmt.Errorf("status.lastDrift = %+v, want corrected and attributed to kubectl-patch (Update, with a time)", d)
		}
		if hr.Status.DriftsDetected != 1 || hr.Status.DriftsCorrected != 1 {
			return fmt.Errorf("status counts detected %d corrected %d, want 1 and 1", hr.Status.DriftsDetected, hr.Status.DriftsCorrected)
		}
		return nil
	})
}

// TestPerObjectOptOut leaves the ConfigMap whose manifest carries the
// opt-out annotation alone, while its sibling is locked, and says so in
// the status.
func TestPerObjectOptOut(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2", "--set", "unlocked={1}")
	cr := env.Register(t, ns, "cms")
	hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	want := []v1alpha1.ObjectProblem{{Object: "ConfigMap cms-1", Reason: "OptedOut", Message: `the chart sets helmreleases.cattle.io/lock: "false" on it`}}
	if diff := cmp.Diff(want, hr.Status.NotLocked); diff != "" {
		t.Errorf("status.notLocked (-want +got):\n%s", diff)
	}
	if hr.Status.LockedObjects != 1 {
		t.Errorf("status.lockedObjects = %d, want 1", hr.Status.LockedObjects)
	}
	editStays(t, ns, "cms-1", "mine", "its manifest opts it out")
	setKey(t, ns, "cms-0", "drifted")
	waitForKey(t, ns, "cms-0", "declared")
}

// TestFightIsBounded runs a second writer that sets a locked field every
// 200 ms. The locker corrects a few times, then backs off: its writes stay
// bounded, and the CR says Fighting, naming the writer, the path and the
// ignore rule that would end it.
func TestFightIsBounded(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm3, ns, "cms", 1)

	// Every version with data.key back at "declared" is a locker write.
	w, err := env.Dynamic.Resource(configMaps).Namespace(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=cms-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var lockerWrites atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified {
				if v, _, _ := unstructured.NestedString(u.Object, "data", "key"); v == "declared" {
					lockerWrites.Add(1)
				}
			}
		}
	}()

	const fight = 15 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), fight)
	defer cancel()
	fighterWrites := 0
	for tick := time.NewTicker(200 * time.Millisecond); ctx.Err() == nil; <-tick.C {
		patch := fmt.Sprintf(`{"data":{"key":"fighter-%d"}}`, fighterWrites)
		if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(ctx, "cms-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "fighter"}); err == nil {
			fighterWrites++
		}
	}
	// 6 corrections start the fight, then one per ended hold (10 s, 20 s).
	if got := lockerWrites.Load(); got < 6 || got > 9 {
		t.Errorf("the locker wrote %d times during a %s fight against %d writes, want 6 to 9", got, fight, fighterWrites)
	}
	hr := waitForCondition(t, cr, v1alpha1.ConditionFighting, metav1.ConditionTrue)
	msg := findCondition(hr, v1alpha1.ConditionFighting).Message
	for _, part := range []string{"fighter (Update", "/data/key", "ConfigMap " + ns + "/cms-0", `spec.ignore: {"paths": ["/data/key"]`} {
		if !strings.Contains(msg, part) {
			t.Errorf("Fighting condition message %q lacks %q", msg, part)
		}
	}
	if c := findCondition(hr, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready during a fight = %+v, want False", c)
	}
	waitForEvent(t, cr, "Fighting", "fighter", "/data/key", "spec.ignore")
}

// freeAddress returns a loopback address with a port free right now.
// TestMetricsHealthAndJSONLogs runs a locker of its own with metrics,
// probes and JSON logs, makes a known number of drifts, and reads the
// counters back from /metrics.
func TestMetricsHealthAndJSONLogs(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	locker, err := env.StartLocker("metrics-locker", "--namespace", registration, "--controller-name", "metrics-locker",
		"--leader-elect=false", "--log-format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	metricsAddr, healthAddr := framework.ServedAddress(t, locker, "metrics"), framework.ServedAddress(t, locker, "health probes")
	env.Eventually(t, 30*time.Second, func() error {
		if code, body := framework.HTTPGet("http://" + healthAddr + "/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz = %d %q", code, body)
		}
		return nil
	})
	if code, _ := framework.HTTPGet("http://" + healthAddr + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}

	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterWith(t, registration, ns, "cms", nil)
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	const drifts = 3
	for i := range drifts {
		setKey(t, ns, fmt.Sprintf("cms-%d", i%2), fmt.Sprintf("drift-%d", i))
		waitForKey(t, ns, fmt.Sprintf("cms-%d", i%2), "declared")
	}
	labels := fmt.Sprintf(`{kind="ConfigMap",namespace=%q,release="cms"}`, ns)
	want := map[string]string{
		fmt.Sprintf(`helm_locker_drift_detected_total{kind="ConfigMap",manager="kubectl-edit",namespace=%q,release="cms"}`, ns): fmt.Sprint(drifts),
		"helm_locker_drift_corrected_total" + labels:                         fmt.Sprint(drifts),
		"helm_locker_revert_latency_seconds_count":                           fmt.Sprint(drifts),
		"helm_locker_locked_releases":                                        "1",
		"helm_locker_locked_objects":                                         "2",
		`helm_locker_informers{group="",resource="configmaps",version="v1"}`: "1",
		`workqueue_adds_total{name="locks"}`:                                 "",
	}
	env.Eventually(t, 30*time.Second, func() error {
		code, body := framework.HTTPGet("http://" + metricsAddr + "/metrics")
		if code != http.StatusOK {
			return fmt.Errorf("/metrics = %d", code)
		}
		values := map[string]string{}
		for _, line := range strings.Split(body, "\n") {
			if name, value, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
				values[name] = value
			}
		}
		for name, v := range want {
			got, ok := values[name]
			switch {
			case !ok:
				return fmt.Errorf("/metrics has no %s", name)
			case v != "" && got != v:
				return fmt.Errorf("%s = %s, want %s", name, got, v)
			}
		}
		return nil
	})

	log, err := os.ReadFile(locker.Log)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("--log-format=json wrote a line that is not JSON: %q", line)
		}
		if entry["msg"] == nil || entry["level"] == nil {
			t.Fatalf("JSON log line without msg or level: %q", line)
		}
		lines++
	}
	if lines == 0 {
		t.Error("the JSON locker logged nothing")
	}
}

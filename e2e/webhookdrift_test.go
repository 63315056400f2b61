package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestWebhookDefaultsAsServiceAccount locks the webstack chart as the
// locker itself and as a ServiceAccount that may write everything in the
// release namespace but nothing cluster-scoped. The chart's
// ValidatingWebhookConfiguration leaves each rule's scope, inside the
// atomic list webhooks[].rules, to the API server's default ("*"). Nobody
// changed it, so neither lock may see drift, whoever it writes as; and a
// real edit of the webhook is reverted, or reported as refused where the
// ServiceAccount may not write it.
func TestWebhookDefaultsAsServiceAccount(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		for _, withSA := range []bool{false, true} {
			name := v.String() + "/locker"
			if withSA {
				name = v.String() + "/writer"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				lockWebstackAs(t, v, withSA)
			})
		}
	}
}

func lockWebstackAs(t *testing.T, v framework.HelmVersion, withSA bool) {
	ns := env.Namespace(t)
	// The webhook configuration is cluster-scoped and named after the
	// release, so the release takes the namespace's unique suffix.
	release := "wh" + ns[strings.LastIndex(ns, "-"):]
	var spec map[string]any
	if withSA {
		env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
		env.Kubectl(t, "-n", ns, "create", "role", "everything", "--verb=*", "--resource=*.*")
		env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--role=everything", "--serviceaccount="+ns+":writer")
		spec = map[string]any{"serviceAccountName": "writer"}
	}
	env.Helm(t, v, "install", release, framework.Chart(t, "webstack"), "-n", ns)
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, spec)
	defer func() {
		if t.Failed() {
			logVWCLines(t, release+"-webstack")
		}
	}()

	// The lock settles with nothing to correct, and writes nothing.
	deadline := time.Now().Add(30 * time.Second)
	hr := env.HelmRelease(t, cr)
	for hr.Status.State != v1alpha1.StateDeployed && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		hr = env.HelmRelease(t, cr)
	}
	if c := findCondition(hr, v1alpha1.ConditionLocked); hr.Status.State != v1alpha1.StateDeployed || c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("state %q, Locked = %+v; want Deployed, Locked=True", hr.Status.State, c)
	}
	time.Sleep(3 * time.Second) // past the 2 s the drift bookkeeping waits
	if c := findCondition(env.HelmRelease(t, cr), v1alpha1.ConditionDrifted); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("Drifted = True: %s", c.Message)
	}
	noDrift(t, cr, "after the first lock")
	if wrote := lockerWrote(t, releaseObjects(t, v, ns, release)); len(wrote) > 0 {
		t.Errorf("the locker wrote to objects Helm had just installed: %v", wrote)
	}
	if t.Failed() {
		return
	}

	// A real edit of the webhook is drift: reverted by the locker, and
	// refused to a ServiceAccount that may not write cluster-scoped
	// objects.
	vwc := corpusObject{kind: "ValidatingWebhookConfiguration", name: release + "-webstack",
		gvr: schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}}
	vwc.patch(t, types.JSONPatchType, `[{"op":"replace","path":"/webhooks/0/sideEffects","value":"NoneOnDryRun"}]`)
	env.Eventually(t, 30*time.Second, func() error {
		if withSA {
			hr := env.HelmRelease(t, cr)
			c := findCondition(hr, v1alpha1.ConditionDrifted)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "/sideEffects") {
				return fmt.Errorf("Drifted = %+v, want True at /sideEffects", c)
			}
			if l := findCondition(hr, v1alpha1.ConditionLocked); l == nil || l.Reason != "Forbidden" {
				return fmt.Errorf("Locked = %+v, want the correction Forbidden", l)
			}
			return nil
		}
		webhooks, _, _ := unstructured.NestedSlice(vwc.get(t).Object, "webhooks")
		if got := webhooks[0].(map[string]any)["sideEffects"]; got != "None" {
			return fmt.Errorf("%s: sideEffects = %v, want None back", vwc, got)
		}
		return nil
	})
}

// logVWCLines logs the shared locker's log lines about a webhook
// configuration, to explain a failure.
func logVWCLines(t *testing.T, name string) {
	for _, line := range strings.Split(framework.LogTail(env.Locker, 5000), "\n") {
		if strings.Contains(line, "ValidatingWebhookConfiguration "+name) {
			t.Log(line)
		}
	}
}

// TestUncheckedWebhookLeastPrivilege locks the webstack chart
// with the locker's chart at its least-privilege RBAC (rbac.writeAll
// false), as a ServiceAccount that may write everything in the release
// namespace but nothing cluster-scoped. The ValidatingWebhookConfiguration
// differs from the manifest only by the API server's default of each
// rule's scope, and neither the writer nor the locker may dry-run its
// correction to learn that: the lock cannot tell that default from drift.
// It must say so (Locked and Ready False, reason Unchecked, the object in
// notLocked), and never call it drift: no drift counted, no Drift event,
// nothing written.
func TestUncheckedWebhookLeastPrivilege(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	startChartLocker(t, registration, registration, "--set",
		"rbac.impersonate.serviceAccounts={writer},rbac.extraReadRules[0].apiGroups={webstack.example.com},rbac.extraReadRules[0].resources={gizmos}")

	ns := env.Namespace(t)
	release := "wh" + ns[strings.LastIndex(ns, "-"):]
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
	env.Kubectl(t, "-n", ns, "create", "role", "everything", "--verb=*", "--resource=*.*")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--role=everything", "--serviceaccount="+ns+":writer")
	env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "webstack"), "-n", ns)
	cr := env.RegisterWith(t, registration, ns, release, map[string]any{"serviceAccountName": "writer"})

	vwc := "ValidatingWebhookConfiguration " + release + "-webstack"
	env.Eventually(t, 60*time.Second, func() error {
		hr := env.HelmReleaseIn(t, registration, cr)
		for _, typ := range []string{v1alpha1.ConditionLocked, v1alpha1.ConditionReady} {
			c := findCondition(hr, typ)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonUnchecked || !strings.Contains(c.Message, vwc) {
				return fmt.Errorf("%s = %+v, want False, Unchecked, naming %s", typ, c, vwc)
			}
		}
		for _, p := range hr.Status.NotLocked {
			if p.Object == vwc && p.Reason == v1alpha1.ReasonUnchecked {
				return nil
			}
		}
		return fmt.Errorf("notLocked = %+v, want %s Unchecked", hr.Status.NotLocked, vwc)
	})
	time.Sleep(3 * time.Second) // past the 2 s the drift bookkeeping waits
	hr := env.HelmReleaseIn(t, registration, cr)
	t.Logf("Locked: %s; notLocked: %+v", findCondition(hr, v1alpha1.ConditionLocked).Message, hr.Status.NotLocked)
	if c := findCondition(hr, v1alpha1.ConditionDrifted); c == nil || c.Status == metav1.ConditionTrue {
		t.Errorf("Drifted = %+v, want not True", c)
	}
	if hr.Status.DriftsDetected != 0 || hr.Status.DriftsCorrected != 0 || hr.Status.LastDrift != nil {
		t.Errorf("%d drifts detected, %d corrected (last: %+v); want none", hr.Status.DriftsDetected, hr.Status.DriftsCorrected, hr.Status.LastDrift)
	}
	for _, ev := range env.Events(t, registration, cr) {
		if strings.HasPrefix(ev.Reason, "Drift") || ev.Reason == "Fighting" {
			t.Errorf("event %s: %s", ev.Reason, ev.Message)
		}
	}
	if wrote := lockerWrote(t, releaseObjects(t, framework.Helm4, ns, release)); len(wrote) > 0 {
		t.Errorf("the locker wrote to objects Helm had just installed: %v", wrote)
	}
}

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

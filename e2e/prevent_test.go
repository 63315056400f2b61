package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/internal/admission"
)

// webhookConfigName is the shared locker's ValidatingWebhookConfiguration.
const webhookConfigName = "helm-locker." + framework.RegistrationNamespace

// kubectlEditor returns an editor for kubectl edit that replaces from with
// to in the file it is given, as a person would.
func kubectlEditor(t *testing.T, from, to string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "editor.sh")
	script := fmt.Sprintf("#!/bin/sh\nsed -i 's/%s/%s/' \"$1\"\n", from, to)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitForRules waits until the shared locker's webhook configuration sends
// the resources to the webhook.
func waitForRules(t *testing.T, resources ...string) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		cfg, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), webhookConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var have []string
		for _, w := range cfg.Webhooks {
			for _, r := range w.Rules {
				have = append(have, r.Resources...)
			}
		}
		for _, r := range resources {
			if !slices.Contains(have, r) {
				return fmt.Errorf("webhook configuration %s sends %v; want %s among them", webhookConfigName, have, r)
			}
		}
		return nil
	})
}

// denied runs kubectl and wants it refused with a message containing each
// of want.
func denied(t *testing.T, want []string, args ...string) {
	t.Helper()
	out, err := env.KubectlE(t, args...)
	if err == nil {
		t.Errorf("kubectl %s was allowed (%s); want it denied", strings.Join(args, " "), out)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("kubectl %s: %v\nwant the denial to say %q", strings.Join(args, " "), err, w)
		}
	}
}

// TestPreventMode: with spec.mode Prevent, kubectl's patch, scale, delete
// and a server-side dry run of a locked object are denied, naming the lock,
// the field and how to change it; a label, an ignored path and Kubernetes'
// own deleters go through; Helm upgrades, rolls back and uninstalls with no
// force flag. The denied user is in an event and status.lastDenied.
func TestPreventMode(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			release := "prev"
			env.Helm(t, v, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=3")
			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{
				"mode":   "Prevent",
				"ignore": []any{map[string]any{"paths": []any{"/data/fixed"}, "target": map[string]any{"name": release + "-2"}}},
			})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			waitForRules(t, "configmaps")
			cm := release + "-0"
			lockWords := []string{"ConfigMap " + ns + "/" + cm + " is locked by HelmRelease " + framework.RegistrationNamespace + "/" + cr, "helm upgrade " + release + " -n " + ns}

			// Refused, the object stays as it was.
			denied(t, append(lockWords, `/data/key must stay "declared"`), "-n", ns, "patch", "configmap", cm, "--type=merge", "-p", `{"data":{"key":"edited"}}`)
			editor := kubectlEditor(t, "key: declared", "key: edited")
			if out, err := env.KubectlWithEnv(t, []string{"KUBE_EDITOR=" + editor}, "-n", ns, "edit", "configmap", cm); err == nil || !strings.Contains(err.Error(), lockWords[0]) {
				t.Errorf("kubectl edit of a held field = %s, %v; want it denied, naming the lock", out, err)
			}
			denied(t, append(lockWords, "may not be deleted"), "-n", ns, "delete", "configmap", cm)
			if v, ok := keyOf(t, ns, cm); !ok || v != "declared" {
				t.Errorf("ConfigMap %s/%s data.key = %q (exists %v) after denied requests; want declared", ns, cm, v, ok)
			}
			env.Eventually(t, 10*time.Second, func() error {
				hr := env.HelmRelease(t, cr)
				d := hr.Status.LastDenied
				if d == nil || d.User != "admin" || d.Operation != "DELETE" || d.Object != "ConfigMap "+ns+"/"+cm {
					return fmt.Errorf("status.lastDenied = %+v; want admin's DELETE of ConfigMap %s/%s", d, ns, cm)
				}
				return nil
			})
			env.Eventually(t, 10*time.Second, func() error {
				for _, e := range env.Events(t, framework.RegistrationNamespace, cr) {
					if e.Reason == "Denied" && strings.Contains(e.Message, "UPDATE of ConfigMap "+ns+"/"+cm+" by admin") {
						return nil
					}
				}
				return fmt.Errorf("no Denied event naming admin's UPDATE of ConfigMap %s/%s", ns, cm)
			})

			// A dry run is judged alike, and records nothing.
			before := env.HelmRelease(t, cr).Status.LastDenied
			denied(t, lockWords, "-n", ns, "patch", "configmap", cm, "--dry-run=server", "--type=merge", "-p", `{"data":{"key":"dry"}}`)
			env.Consistently(t, 2*time.Second, func() error {
				if d := env.HelmRelease(t, cr).Status.LastDenied; d == nil || !d.Time.Equal(&before.Time) || d.Operation != before.Operation {
					return fmt.Errorf("status.lastDenied = %+v after a dry run; want it unchanged from %+v", d, before)
				}
				return nil
			})

			// What the lock does not hold goes through.
			env.Kubectl(t, "-n", ns, "label", "configmap", cm, "team=a")
			env.Kubectl(t, "-n", ns, "patch", "configmap", cm, "--type=merge", "-p", `{"data":{"added":"x"}}`)
			env.Kubectl(t, "-n", ns, "patch", "configmap", release+"-2", "--type=merge", "-p", `{"data":{"fixed":"mine"}}`)
			env.Consistently(t, time.Second, func() error {
				if got := env.Kubectl(t, "-n", ns, "get", "configmap", release+"-2", "-o", "jsonpath={.data.fixed}"); got != "mine" {
					return fmt.Errorf("ignored data.fixed = %q; want mine, kept", got)
				}
				return nil
			})
			// Put back, or Helm 4's apply would meet kubectl's value
			// there as a conflict, as it would without a lock.
			env.Kubectl(t, "-n", ns, "patch", "configmap", release+"-2", "--type=merge", "-p", `{"data":{"fixed":"unchanged"}}`)
			// So do Kubernetes' own deleters, and the break-glass group.
			env.Kubectl(t, "-n", ns, "delete", "configmap", release+"-1", "--as="+admission.GarbageCollector)
			waitForKey(t, ns, release+"-1", "declared")
			env.Kubectl(t, "-n", ns, "delete", "configmap", release+"-1", "--as="+admission.NamespaceController)
			env.Kubectl(t, "-n", ns, "patch", "configmap", release+"-2", "--type=merge", "-p", `{"data":{"key":"glass"}}`,
				"--as=oncall", "--as-group="+framework.ExemptGroup, "--as-group=system:masters")
			// The lock recreates and reverts what got through.
			waitForKey(t, ns, release+"-1", "declared")
			waitForKey(t, ns, release+"-2", "declared")

			// Helm is never fought.
			env.Helm(t, v, "upgrade", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=3,value=upgraded")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			waitForKey(t, ns, cm, "upgraded")
			denied(t, []string{`/data/key must stay "upgraded"`}, "-n", ns, "patch", "configmap", cm, "--type=merge", "-p", `{"data":{"key":"edited"}}`)
			env.Helm(t, v, "rollback", release, "1", "-n", ns)
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 3)
			waitForKey(t, ns, cm, "declared")
			env.Helm(t, v, "uninstall", release, "-n", ns)
			env.Eventually(t, 30*time.Second, func() error {
				if _, ok := keyOf(t, ns, cm); ok {
					return fmt.Errorf("ConfigMap %s/%s still there after helm uninstall", ns, cm)
				}
				return nil
			})
		})
	}
}

// TestPreventModeScale: kubectl scale of a locked Deployment is denied at
// its scale subresource, with both CLIs.
func TestPreventModeScale(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			preventScale(t, v)
		})
	}
}

func preventScale(t *testing.T, v framework.HelmVersion) {
	ns := env.Namespace(t)
	// The chart names its cluster-wide CRD after the release.
	release := "scaled-" + v.String()
	env.Helm(t, v, "install", release, framework.Chart(t, "webstack"), "-n", ns)
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{"mode": "Prevent"})
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	waitForRules(t, "deployments", "deployments/scale")
	deployment := release + "-webstack"
	denied(t, []string{"Deployment " + ns + "/" + deployment + " is locked by HelmRelease", "/spec/replicas must stay 2"},
		"-n", ns, "scale", "deployment", deployment, "--replicas=5")
	if replicas := env.Kubectl(t, "-n", ns, "get", "deployment", deployment, "-o", "jsonpath={.spec.replicas}"); replicas != "2" {
		t.Errorf("Deployment %s/%s has %s replicas after a denied scale; want 2", ns, deployment, replicas)
	}

	// The configuration, once current, is not written again for nothing:
	// what the locker writes compares equal to what the API server
	// stores. (Other tests' locks may change its rules meanwhile.)
	read := func() (string, string) {
		cfg, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), webhookConfigName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(cfg.Webhooks)
		return cfg.ResourceVersion, string(data)
	}
	version, webhooks := read()
	env.Consistently(t, 3*time.Second, func() error {
		v, w := read()
		if v != version && w == webhooks {
			return fmt.Errorf("webhook configuration %s written again (resourceVersion %s to %s) with the same webhooks", webhookConfigName, version, v)
		}
		version, webhooks = v, w
		return nil
	})
}

// TestPreventModeManifestLock: a ManifestLock in Prevent mode marks its
// objects, denies an edit naming how to change the lock, and lets its own
// change through.
func TestPreventModeManifestLock(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	name := "prevent-" + ns
	createManifestLock(t, framework.RegistrationNamespace, name, map[string]any{"manifest": configMapYAML("a", "declared"), "namespace": ns, "mode": "Prevent"})
	waitManifestLock(t, framework.RegistrationNamespace, name, mlv1.StateLocked)
	waitForRules(t, "configmaps")
	if marker := env.Kubectl(t, "-n", ns, "get", "configmap", "a", "-o", `jsonpath={.metadata.annotations.helm-locker\.io/manifest-lock}`); marker != framework.RegistrationNamespace+"/"+name {
		t.Errorf("ConfigMap %s/a marker annotation = %q; want %s/%s", ns, marker, framework.RegistrationNamespace, name)
	}
	denied(t, []string{"ConfigMap " + ns + "/a is locked by ManifestLock " + framework.RegistrationNamespace + "/" + name, `/data/key must stay "declared"`,
		"kubectl -n " + framework.RegistrationNamespace + " edit ManifestLock " + name}, "-n", ns, "patch", "configmap", "a", "--type=merge", "-p", `{"data":{"key":"edited"}}`)

	// A change through the lock itself is the lock's own write.
	if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), name, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"spec":{"manifest":%q}}`, configMapYAML("a", "changed"))), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKey(t, ns, "a", "changed")
	waitManifestLock(t, framework.RegistrationNamespace, name, mlv1.StateLocked)
	if d := getManifestLock(t, framework.RegistrationNamespace, name).Status.LastDenied; d == nil || d.User != "admin" || d.Operation != "UPDATE" {
		t.Errorf("status.lastDenied = %+v; want admin's UPDATE", d)
	}
}

// TestWarnAndEnforceAreNeverDenied: the webhook sees writes to objects of
// Warn and Enforce locks, since a Prevent lock holds their type, and lets
// every one through.
func TestWarnAndEnforceAreNeverDenied(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	env.Helm(t, framework.Helm4, "install", "prevented", framework.Chart(t, "configmaps"), "-n", ns)
	env.WaitForState(t, env.RegisterWith(t, framework.RegistrationNamespace, ns, "prevented", map[string]any{"mode": "Prevent"}), v1alpha1.StateDeployed, 1)
	waitForRules(t, "configmaps")
	for _, mode := range []string{"Warn", "Enforce"} {
		release := strings.ToLower(mode)
		env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "configmaps"), "-n", ns)
		env.WaitForState(t, env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{"mode": mode}), v1alpha1.StateDeployed, 1)
		if _, err := env.KubectlE(t, "-n", ns, "patch", "configmap", release+"-0", "--type=merge", "-p", `{"data":{"key":"edited"}}`); err != nil {
			t.Errorf("an edit of a %s lock's object was refused: %v", mode, err)
		}
		if _, err := env.KubectlE(t, "-n", ns, "delete", "configmap", release+"-0"); err != nil {
			t.Errorf("a deletion of a %s lock's object was refused: %v", mode, err)
		}
	}
	waitForKey(t, ns, "enforce-0", "declared")
}

// TestPreventModeWithTheLockerDown: with no locker to answer, the API
// server lets an edit through (failurePolicy Ignore), and the locker
// reverts it once it is back. Only writes of objects a lock could hold
// reach the webhook. The test is not parallel: its webhook configuration
// is cluster-wide, and other tests' writes would reach its webhook too.
func TestPreventModeWithTheLockerDown(t *testing.T) {
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	controller := "down-prevent"
	addr := framework.FreeAddress(t)
	flags := []string{"--namespace", registration, "--controller-name", controller, "--leader-elect=false",
		"--webhook-bind-address=" + addr, "--webhook-url=https://" + addr + "/validate"}
	locker, err := env.StartLocker(controller, flags...)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := framework.ServedAddress(t, locker, "metrics")
	t.Cleanup(func() {
		_ = env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), controller+"."+registration, metav1.DeleteOptions{})
	})
	env.Helm(t, framework.Helm3, "install", "down", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterWith(t, registration, ns, "down", map[string]any{"mode": "Prevent"})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	env.Eventually(t, 30*time.Second, func() error {
		if _, err := env.KubectlE(t, "-n", ns, "patch", "configmap", "down-0", "--type=merge", "-p", `{"data":{"key":"edited"}}`); err == nil {
			return errors.New("an edit went through while the locker answers the webhook")
		}
		return nil
	})

	// Writes of objects no lock could hold never reach the webhook: the
	// API server's matchConditions keep them away. A locked object's do.
	reviews := func() int {
		return metric(t, metricsAddr, `helm_locker_admission_reviews_total{allowed="false"}`) + metric(t, metricsAddr, `helm_locker_admission_reviews_total{allowed="true"}`)
	}
	if n := metric(t, metricsAddr, fmt.Sprintf(`helm_locker_admission_denied_total{kind="ConfigMap",namespace=%q,release="down"}`, ns)); n < 1 {
		t.Errorf("helm_locker_admission_denied_total for release %s/down = %d after a denial; want at least 1", ns, n)
	}
	before := reviews()
	env.Kubectl(t, "-n", ns, "create", "configmap", "plain", "--from-literal=key=v")
	for i := range 5 {
		env.Kubectl(t, "-n", ns, "patch", "configmap", "plain", "--type=merge", "-p", fmt.Sprintf(`{"data":{"key":"%d"}}`, i))
	}
	env.Kubectl(t, "-n", ns, "delete", "configmap", "plain")
	if n := reviews() - before; n != 0 {
		t.Errorf("%d writes of an unlocked ConfigMap reached the webhook; want none", n)
	}
	env.Kubectl(t, "-n", ns, "label", "configmap", "down-0", "team=a")
	if n := reviews() - before; n != 1 {
		t.Errorf("a label added to a locked ConfigMap reached the webhook %d times; want once", n)
	}

	if err := locker.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "-n", ns, "patch", "configmap", "down-0", "--type=merge", "-p", `{"data":{"key":"while-down"}}`)
	if v, _ := keyOf(t, ns, "down-0"); v != "while-down" {
		t.Fatalf("data.key = %q with the locker down; want the edit, while-down", v)
	}
	locker, err = env.StartLocker(controller+"-again", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	waitForKey(t, ns, "down-0", "declared")
}

// TestStuckHelmOperationHoldsTheVerifiedRevision: a revision left
// pending-upgrade (by a Helm killed mid-way, or by anyone who may write
// Secrets) opens the lock only until the Helm operation timeout; then the
// last verified revision is held again, the CR says HelmOperationStuck,
// and an edit is reverted.
func TestStuckHelmOperationHoldsTheVerifiedRevision(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	locker, err := env.StartLocker("stuck-locker", "--namespace", registration, "--controller-name", "stuck-locker", "--leader-elect=false", "--helm-operation-timeout=4s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	env.Helm(t, framework.Helm3, "install", "stuck", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterIn(t, registration, ns, "stuck")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	v1, err := env.Kube.CoreV1().Secrets(ns).Get(t.Context(), "sh.helm.release.v1.stuck.v1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A revision created longer ago than the timeout and marked
	// uninstalling now, as `helm uninstall` does, is Helm at work: the
	// timeout counts from that write, not from the Secret's creation.
	time.Sleep(time.Until(v1.CreationTimestamp.Add(5 * time.Second)))
	env.Kubectl(t, "label", "secret", "-n", ns, "sh.helm.release.v1.stuck.v1", "status=uninstalling", "--overwrite")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateTransitioning, 1)
	env.Consistently(t, 2*time.Second, func() error {
		if c := findCondition(env.HelmReleaseIn(t, registration, cr), v1alpha1.ConditionReady); c != nil && c.Reason == "HelmOperationStuck" {
			return fmt.Errorf("a revision marked uninstalling just now is called stuck: %s", c.Message)
		}
		return nil
	})
	env.Kubectl(t, "label", "secret", "-n", ns, "sh.helm.release.v1.stuck.v1", "status=deployed", "--overwrite")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	// Revision 2, pending-upgrade, as a killed `helm upgrade` leaves it.
	v2 := v1.DeepCopy()
	v2.ObjectMeta = metav1.ObjectMeta{Name: "sh.helm.release.v1.stuck.v2", Namespace: ns, Labels: map[string]string{"owner": "helm", "name": "stuck", "version": "2", "status": "pending-upgrade"}}
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(t.Context(), v2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateTransitioning, 2)

	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmReleaseIn(t, registration, cr)
		c := findCondition(hr, v1alpha1.ConditionReady)
		if hr.Status.Version != 1 || c == nil || c.Reason != "HelmOperationStuck" || !strings.Contains(c.Message, "revision 2 has been pending-upgrade") {
			return fmt.Errorf("HelmRelease %s: version %d, Ready %+v; want revision 1 held again, HelmOperationStuck naming revision 2", cr, hr.Status.Version, c)
		}
		return nil
	})
	setKey(t, ns, "stuck-0", "edited")
	waitForKey(t, ns, "stuck-0", "declared")
}

// metric reads one counter of a locker's /metrics; 0 when it is absent.
func metric(t *testing.T, addr, series string) int {
	t.Helper()
	code, body := framework.HTTPGet("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v int
			_, _ = fmt.Sscanf(rest, "%d", &v)
			return v
		}
	}
	return 0
}

// TestStandbyAnswersAdmission: a replica standing by holds the same
// declarations as the leader, read-only, and denies as it would; while the
// leader is SIGKILLed and the standby takes its Lease over, every review
// the standby is sent is still denied.
func TestStandbyAnswersAdmission(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	controller := "ha-prevent"
	configName := controller + "." + registration
	t.Cleanup(func() {
		_ = env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), configName, metav1.DeleteOptions{})
	})
	start := func(name string) (*controlplane.Process, string) {
		addr := framework.FreeAddress(t)
		p, err := env.StartLocker(name, "--namespace", registration, "--controller-name", controller,
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
			"--webhook-bind-address="+addr, "--webhook-url=https://"+addr+"/validate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
		return p, addr
	}
	first, _ := start("ha-prevent-1")
	holder := func() string { return leaseHolder(t, registration, controller) }
	env.Eventually(t, 30*time.Second, func() error {
		if holder() == "" {
			return errors.New("no one leads")
		}
		return nil
	})
	leader := holder()
	_, standbyAddr := start("ha-prevent-2")

	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterWith(t, registration, ns, "cms", map[string]any{"mode": "Prevent"})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	// An edit of cms-0, as the API server would send it for review.
	live, err := env.Dynamic.Resource(configMaps).Namespace(ns).Get(t.Context(), "cms-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	review := editReview(t, live, "cms-0", "alice")
	ask := func() (bool, error) {
		allowed, err := postReview(standbyAddr, review)
		return !allowed, err
	}
	env.Eventually(t, 30*time.Second, func() error {
		if denied, err := ask(); err != nil || !denied {
			return fmt.Errorf("the standby allowed an edit of a Prevent lock's object (err %v)", err)
		}
		return nil
	})
	if h := holder(); h != leader {
		t.Fatalf("the Lease moved to %s before the leader was stopped", h)
	}

	first.Kill()
	killed := time.Now()
	var answered, allowed int
	var tookOver time.Duration
	for time.Since(killed) < 15*time.Second {
		denied, err := ask()
		if err != nil {
			t.Fatalf("the standby did not answer %s after the leader was killed: %v", time.Since(killed).Round(time.Millisecond), err)
		}
		answered++
		if !denied {
			allowed++
		}
		if h := holder(); tookOver == 0 && h != "" && h != leader {
			tookOver = time.Since(killed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after the leader's SIGKILL: the standby answered %d reviews in 15 s, %d allowed; it took the Lease over after %s", answered, allowed, tookOver.Round(time.Millisecond))
	if allowed > 0 || tookOver == 0 {
		t.Errorf("while the leader was replaced, the standby allowed %d of %d edits (want none), and took the Lease after %s (want within 15 s)", allowed, answered, tookOver)
	}
}

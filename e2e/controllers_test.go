package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// The tests in this file need Kubernetes' own controllers, which the e2e
// control plane runs in kube-controller-manager (see e2e/controlplane).

// TestPreventLetsTheGarbageCollectorDelete: a ConfigMap a Prevent lock
// holds, made the dependent of another object, is deleted by the real
// garbage collector when its owner is deleted, with foreground and with
// background propagation. The webhook, which denies the same delete by
// the admin, allows the garbage collector's (as
// system:serviceaccount:kube-system:generic-garbage-collector), records no
// denial, and the lock then recreates the ConfigMap as declared. Last, the
// release's namespace is deleted, and the namespace controller empties it
// and finishes, the lock notwithstanding.
func TestPreventLetsTheGarbageCollectorDelete(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	const controller = "gc-exempt"
	_, metricsAddr := startWebhookLocker(t, controller, registration)
	release := "owned"
	env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterWith(t, registration, ns, release, map[string]any{"mode": "Prevent"})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	waitForConfigRules(t, controller+"."+registration, "configmaps")
	denials := func() int {
		return metric(t, metricsAddr, fmt.Sprintf(`helm_locker_admission_denied_total{kind="ConfigMap",namespace=%q,release=%q}`, ns, release))
	}

	for i, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationBackground} {
		cm := fmt.Sprintf("%s-%d", release, i)
		// The webhook is up and judging: the admin may not delete it.
		denied(t, []string{"ConfigMap " + ns + "/" + cm + " is locked by HelmRelease " + registration + "/" + cr, "may not be deleted"},
			"-n", ns, "delete", "configmap", cm)
		deniedBefore := denials()

		owner, err := env.Kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner-" + strings.ToLower(string(policy))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// An ownerReference is not what the lock holds: adding one is
		// allowed, and left alone.
		ref := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":%q,"uid":%q,"blockOwnerDeletion":true}]}}`, owner.Name, owner.UID)
		dependent, err := env.Kube.CoreV1().ConfigMaps(ns).Patch(t.Context(), cm, types.MergePatchType, []byte(ref), metav1.PatchOptions{FieldManager: "kubectl-patch"})
		if err != nil {
			t.Fatalf("making ConfigMap %s/%s a dependent of %s: %v", ns, cm, owner.Name, err)
		}

		if err := env.Kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		// Only the garbage collector deletes the dependent; the lock
		// makes it anew, as declared and owned by nobody.
		env.Eventually(t, 60*time.Second, func() error {
			got, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), cm, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return fmt.Errorf("ConfigMap %s/%s not recreated yet", ns, cm)
			case err != nil:
				return err
			case got.UID == dependent.UID:
				return fmt.Errorf("ConfigMap %s/%s not deleted by the garbage collector yet after a %s delete of its owner", ns, cm, policy)
			case got.Data["key"] != "declared" || len(got.OwnerReferences) != 0:
				return fmt.Errorf("recreated ConfigMap %s/%s has data.key %q and ownerReferences %v; want declared and none", ns, cm, got.Data["key"], got.OwnerReferences)
			}
			return nil
		})
		env.Eventually(t, 30*time.Second, func() error {
			if _, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), owner.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the owner %s/%s is still there (%v) after a %s delete", ns, owner.Name, err, policy)
			}
			return nil
		})
		if n := denials(); n != deniedBefore {
			t.Errorf("%s delete: %d denials of ConfigMaps of %s counted, %d before; want the garbage collector's delete allowed", policy, n, release, deniedBefore)
		}
		if d := env.HelmReleaseIn(t, registration, cr).Status.LastDenied; d != nil && d.User != "admin" {
			t.Errorf("status.lastDenied = %+v; want only the admin's denials", d)
		}
	}

	// The namespace controller deletes as an exempt identity too, and the
	// namespace goes, though the lock would recreate what it deletes.
	if err := env.Kube.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 60*time.Second, func() error {
		got, err := env.Kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("namespace %s is still %s: %v", ns, got.Status.Phase, got.Status.Conditions)
	})
}

// TestDeploymentControllerWritesAreNotDrift: a Deployment a lock holds is
// written by the Deployment controller, as in every cluster: the
// deployment.kubernetes.io/revision annotation, its status, and its
// ReplicaSets, which write back into that status as their pods become
// ready. None of it is the manifest's, so the locker sends no write and
// counts no drift while the controller writes, with either CLI, before and
// after a helm upgrade that rolls the Deployment out again.
//
// There is no kubelet: the test marks the pods Ready as a kubelet would.
func TestDeploymentControllerWritesAreNotDrift(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	const controller = "deployment-writes"
	locker, err := env.StartLocker(controller, "--namespace", registration, "--controller-name", controller, "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })
	metricsAddr := framework.ServedAddress(t, locker, "metrics")

	// One after the other: the two share the locker whose writes each
	// counts.
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			// The chart names its cluster-wide CRD after the release.
			release := "rolled-" + v.String()
			deployment := release + "-webstack"
			env.Helm(t, v, "install", release, framework.Chart(t, "webstack"), "-n", ns)
			cr := env.RegisterIn(t, registration, ns, release)
			env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
			waitForRollout(t, ns, deployment, 1)
			quietWhileReady(t, metricsAddr, ns, deployment, "revision 1")

			env.Helm(t, v, "upgrade", release, framework.Chart(t, "webstack"), "-n", ns, "--set", "podAnnotations.rolled=again")
			env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 2)
			waitForRollout(t, ns, deployment, 2)
			quietWhileReady(t, metricsAddr, ns, deployment, "revision 2")

			if hr := env.HelmReleaseIn(t, registration, cr); hr.Status.DriftsDetected != 0 {
				t.Errorf("HelmRelease %s counts %d drifts; want none: the Deployment controller's writes are not drift", cr, hr.Status.DriftsDetected)
			}
		})
	}
	if n := metricSum(t, metricsAddr, "helm_locker_drift_detected_total"); n != 0 {
		t.Errorf("helm_locker_drift_detected_total = %d; want 0", n)
	}
}

// waitForRollout waits until the Deployment controller has rolled ns/name
// out at revision: the annotation, a ReplicaSet of that revision with all
// its pods, and the Deployment's status observing its generation.
func waitForRollout(t *testing.T, ns, name string, revision int) {
	t.Helper()
	env.Eventually(t, 60*time.Second, func() error {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := d.Annotations["deployment.kubernetes.io/revision"]; got != strconv.Itoa(revision) {
			return fmt.Errorf("Deployment %s/%s revision annotation = %q, want %d", ns, name, got, revision)
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != *d.Spec.Replicas || d.Status.Replicas != *d.Spec.Replicas {
			return fmt.Errorf("Deployment %s/%s status %+v, want generation %d observed and %d updated replicas", ns, name, d.Status, d.Generation, *d.Spec.Replicas)
		}
		pods := readyPods(t, ns, d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"])
		if len(pods) != int(*d.Spec.Replicas) {
			return fmt.Errorf("%d pods of Deployment %s/%s, want %d", len(pods), ns, name, *d.Spec.Replicas)
		}
		// The controller, not a stand-in, wrote both, through the
		// status subresource.
		var wrote string
		for _, f := range d.ManagedFields {
			if f.Manager == "kube-controller-manager" && f.FieldsV1 != nil {
				wrote += string(f.FieldsV1.Raw)
			}
		}
		if !strings.Contains(wrote, `"f:deployment.kubernetes.io/revision"`) || !strings.Contains(wrote, `"f:status"`) {
			return fmt.Errorf("Deployment %s/%s: kube-controller-manager owns %s; want the revision annotation and the status", ns, name, wrote)
		}
		return nil
	})
}

// settledWrites waits until the locker at metricsAddr has sent no write
// for 2 s, and returns its request counts then: the lock's status and
// events, after a lock or an upgrade, land within about that.
func settledWrites(t *testing.T, metricsAddr string) map[string]int {
	t.Helper()
	counts := requestCounts(t, metricsAddr)
	if len(counts) == 0 {
		t.Fatalf("the locker's /metrics at %s counts no requests: rest_client_requests_total is missing", metricsAddr)
	}
	quietSince := time.Now()
	env.Eventually(t, 30*time.Second, func() error {
		now := requestCounts(t, metricsAddr)
		if writeRequests(counts, now) != 0 {
			counts, quietSince = now, time.Now()
		}
		if quiet := time.Since(quietSince); quiet < 2*time.Second {
			return fmt.Errorf("the locker wrote %s ago; waiting for 2 s without a write", quiet.Round(time.Millisecond))
		}
		return nil
	})
	return counts
}

// readyPods lists the live pods of release's Deployment in ns, by whether
// they are Ready.
func readyPods(t *testing.T, ns, release string) map[string]bool {
	t.Helper()
	list, err := env.Kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || len(p.OwnerReferences) == 0 || p.OwnerReferences[0].Kind != "ReplicaSet" {
			continue
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		pods[p.Name] = ready
	}
	return pods
}

// quietWhileReady marks the pods of ns/deployment Ready, as a kubelet
// would, and waits for the Deployment controller to write the Deployment's
// status from its ReplicaSet's. Over that window the locker must send no
// write and count no drift.
func quietWhileReady(t *testing.T, metricsAddr, ns, deployment, when string) {
	t.Helper()
	before := settledWrites(t, metricsAddr)
	driftsBefore := metricSum(t, metricsAddr, "helm_locker_drift_detected_total")
	d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"]
	now := metav1.Now()
	for pod := range readyPods(t, ns, release) {
		status := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
		patch := fmt.Sprintf(`{"status":%s}`, mustJSON(t, status))
		if _, err := env.Kube.CoreV1().Pods(ns).Patch(t.Context(), pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubelet"}, "status"); err != nil {
			t.Fatalf("marking pod %s/%s Ready: %v", ns, pod, err)
		}
	}
	env.Eventually(t, 60*time.Second, func() error {
		d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), deployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas || d.Status.AvailableReplicas != *d.Spec.Replicas {
			return fmt.Errorf("%s: Deployment %s/%s has %d ready and %d available replicas, want %d: the Deployment controller has not written them", when, ns, deployment, d.Status.ReadyReplicas, d.Status.AvailableReplicas, *d.Spec.Replicas)
		}
		return nil
	})
	// The lock hears of the controller's write within milliseconds; give
	// it time to answer, if it were to.
	time.Sleep(2 * time.Second)
	after := requestCounts(t, metricsAddr)
	sent, _ := countsSince(before, after)
	t.Logf("%s: while the Deployment controller wrote, the locker sent %s", when, sent)
	if writes := writeRequests(before, after); writes != 0 {
		t.Errorf("%s: the locker sent %d writes while the Deployment controller wrote (%s); want none", when, writes, sent)
	}
	if n := metricSum(t, metricsAddr, "helm_locker_drift_detected_total"); n != driftsBefore {
		t.Errorf("%s: helm_locker_drift_detected_total went from %d to %d while the Deployment controller wrote; want no drift", when, driftsBefore, n)
	}
}

// writeRequests counts the writes among what requestCounts read between
// two readings.
func writeRequests(before, after map[string]int) int {
	writes := 0
	for k, n := range after {
		method, _, _ := strings.Cut(k, " ")
		switch method {
		case "POST", "PUT", "PATCH", "DELETE":
			writes += n - before[k]
		}
	}
	return writes
}

// metricSum adds up every series of a locker's metric name.
func metricSum(t *testing.T, addr, name string) int {
	t.Helper()
	code, body := framework.HTTPGet("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("GET %s/metrics: %d %s", addr, code, body)
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum += n
	}
	return int(sum)
}

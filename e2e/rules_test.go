package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/yaml"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// The rules of real clusters that a lock must follow, each with the status
// reason it reports.

var (
	clusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	jobs         = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

func waitForLockedReason(t *testing.T, cr, reason string) *v1alpha1.HelmRelease {
	t.Helper()
	var hr *v1alpha1.HelmRelease
	env.Eventually(t, 30*time.Second, func() error {
		hr = env.HelmRelease(t, cr)
		if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Reason != reason {
			return fmt.Errorf("HelmRelease %s: Locked %+v, want reason %s", cr, c, reason)
		}
		return nil
	})
	return hr
}

// TestSecondCRForALockedReleaseConflicts: a second CR naming a locked
// release says Conflict and holds nothing; once the first is deleted, it
// takes the lock over.
func TestSecondCRForALockedReleaseConflicts(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	storeRelease(t, ns, "app", "---\n# Source: app/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: declared\n")
	first := env.Register(t, ns, "app")
	env.WaitForState(t, first, v1alpha1.StateDeployed, 1)
	second := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
		"metadata": map[string]any{"name": first + "-again", "namespace": framework.RegistrationNamespace},
		"spec":     map[string]any{"release": map[string]any{"name": "app", "namespace": ns}},
	}}
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Create(t.Context(), second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hr := waitForLockedReason(t, first+"-again", "Conflict")
	if hr.Status.State != v1alpha1.StateError || hr.Status.LockedObjects != 0 {
		t.Errorf("second CR: state %q, %d objects locked; want Error and none", hr.Status.State, hr.Status.LockedObjects)
	}
	if err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Delete(t.Context(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForState(t, first+"-again", v1alpha1.StateDeployed, 1)
	setKey(t, ns, "cm", "drifted")
	waitForKey(t, ns, "cm", "declared")
}

// TestAggregatedClusterRoleRulesAreLeftToTheirController: the rules of a
// ClusterRole with an aggregationRule are written by the aggregation
// controller, never by the chart; the lock leaves them, and holds the rest.
func TestAggregatedClusterRoleRulesAreLeftToTheirController(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	name := "aggregated-" + ns
	storeRelease(t, ns, "agg", fmt.Sprintf(`---
# Source: agg/templates/role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %s
  labels:
    app: agg
aggregationRule:
  clusterRoleSelectors:
    - matchLabels:
        example.com/aggregate-to-locker-test: "true"
rules: []
`, name))
	if _, err := env.Dynamic.Resource(clusterRoles).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": name,
			"labels":      map[string]any{"app": "agg", "app.kubernetes.io/managed-by": "Helm"},
			"annotations": map[string]any{"meta.helm.sh/release-name": "agg", "meta.helm.sh/release-namespace": ns}},
		"aggregationRule": map[string]any{"clusterRoleSelectors": []any{map[string]any{"matchLabels": map[string]any{"example.com/aggregate-to-locker-test": "true"}}}},
	}}, metav1.CreateOptions{FieldManager: "helm"}); err != nil { // as Helm applied it
		t.Fatal(err)
	}
	cr := env.Register(t, ns, "agg")
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	// A ClusterRole the selector picks, whose rule kube-controller-manager's
	// aggregation controller then writes into the locked one.
	if _, err := env.Dynamic.Resource(clusterRoles).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": name + "-pods", "labels": map[string]any{"example.com/aggregate-to-locker-test": "true"}},
		"rules":    []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get", "list"}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 30*time.Second, func() error {
		if got, _, _ := unstructured.NestedSlice(env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", name).Object, "rules"); len(got) != 1 {
			return fmt.Errorf("ClusterRole %s rules = %v, want the aggregation controller to have written the rule it selects", name, got)
		}
		return nil
	})
	env.Consistently(t, 2*time.Second, func() error {
		got, _, _ := unstructured.NestedSlice(env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", name).Object, "rules")
		if len(got) != 1 {
			return fmt.Errorf("ClusterRole %s rules = %v, want the aggregated rule kept", name, got)
		}
		return nil
	})
	if hr := env.HelmRelease(t, cr); hr.Status.DriftsDetected != 0 {
		t.Errorf("%d drifts detected; the aggregated rules are not drift", hr.Status.DriftsDetected)
	}
	// The rest of the ClusterRole is still held.
	if _, err := env.Dynamic.Resource(clusterRoles).Patch(t.Context(), name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"edited"}}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 30*time.Second, func() error {
		if got := env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", name).GetLabels()["app"]; got != "agg" {
			return fmt.Errorf("ClusterRole %s label app = %q, want agg back", name, got)
		}
		return nil
	})
}

// TestImmutableFieldIsReportedOnce: a correction the API server refuses
// because the field cannot change (a Job's template) is reported once as
// Immutable and tried again at most once a minute, not in a loop.
func TestImmutableFieldIsReportedOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	job := func(image string) string {
		return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: %s
`, image)
	}
	storeRelease(t, ns, "db", "---\n# Source: db/templates/job.yaml\n"+job("migrate:1"))
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "db", map[string]any{"suspend": true})
	env.WaitForState(t, cr, v1alpha1.StateSuspended, 0)
	// The Job as someone recreated it while the lock was suspended.
	if _, err := env.Dynamic.Resource(jobs).Namespace(ns).Create(t.Context(), yamlObject(t, job("migrate:2")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := apiServerRequests(t, "PATCH", "jobs", 422)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), cr, types.MergePatchType, []byte(`{"spec":{"suspend":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	hr := waitForLockedReason(t, cr, "Immutable")
	if len(hr.Status.NotLocked) != 1 || hr.Status.NotLocked[0].Reason != "Immutable" {
		t.Errorf("notLocked = %+v, want the Job as Immutable", hr.Status.NotLocked)
	}
	time.Sleep(5 * time.Second)
	if n := apiServerRequests(t, "PATCH", "jobs", 422) - before; n != 1 {
		t.Errorf("%d PATCHes of the Job refused in 5 s, want 1", n)
	}
	failed := 0
	for _, ev := range env.Events(t, framework.RegistrationNamespace, cr) {
		if ev.Reason == "DriftCorrectionFailed" {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d DriftCorrectionFailed events, want 1", failed)
	}
}

// TestGenerateNameObjectsAreNotLocked: an object named by generateName has
// no one object to hold: it is reported, and the rest is locked.
func TestGenerateNameObjectsAreNotLocked(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	storeRelease(t, ns, "gen", `---
# Source: gen/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
data:
  key: declared
---
# Source: gen/templates/run.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  generateName: run-
data:
  key: once
`)
	cr := env.Register(t, ns, "gen")
	hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	if len(hr.Status.NotLocked) != 1 || hr.Status.NotLocked[0].Reason != "GenerateName" {
		t.Errorf("notLocked = %+v, want the generateName object as GenerateName", hr.Status.NotLocked)
	}
	setKey(t, ns, "cm", "drifted")
	waitForKey(t, ns, "cm", "declared")
}

func yamlObject(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	data, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFinishedJobWithTTLIsNotRecreated: once a Job has finished, the
// TTL-after-finished controller deletes it; the lock lets it go, and says
// so, rather than run it again.
func TestFinishedJobWithTTLIsNotRecreated(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	storeRelease(t, ns, "batch", `---
# Source: batch/templates/job.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  ttlSecondsAfterFinished: 3
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: migrate:1
`)
	cr := env.Register(t, ns, "batch")
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	// The Job controller runs the Job's pod; there is no kubelet, so the
	// test ends it, as a kubelet would once its container exited 0.
	var pod string
	env.Eventually(t, 30*time.Second, func() error {
		pods, err := env.Kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=migrate"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("Job %s/migrate has %d pods, want the Job controller to have made 1", ns, len(pods.Items))
		}
		pod = pods.Items[0].Name
		return nil
	})
	now := time.Now().UTC().Format(time.RFC3339)
	succeeded := fmt.Sprintf(`{"status":{"phase":"Succeeded","containerStatuses":[{"name":"migrate","image":"migrate:1","imageID":"","ready":false,"restartCount":0,`+
		`"state":{"terminated":{"exitCode":0,"reason":"Completed","startedAt":%q,"finishedAt":%[1]q}}}]}}`, now)
	if _, err := env.Kube.CoreV1().Pods(ns).Patch(t.Context(), pod, types.StrategicMergePatchType, []byte(succeeded), metav1.PatchOptions{FieldManager: "kubelet"}, "status"); err != nil {
		t.Fatal(err)
	}
	// The Job controller marks the Job Complete, and 3 s later the
	// TTL-after-finished controller deletes it, with foreground
	// propagation, so the garbage collector deletes its pod first.
	env.Eventually(t, 60*time.Second, func() error {
		if job := env.Get(t, "batch/v1", "jobs", ns, "migrate"); job != nil {
			conditions, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
			return fmt.Errorf("Job %s/migrate not deleted by its TTL yet; conditions %v", ns, conditions)
		}
		return nil
	})
	env.Consistently(t, 3*time.Second, func() error {
		if env.Get(t, "batch/v1", "jobs", ns, "migrate") != nil {
			return fmt.Errorf("the finished Job %s/migrate was recreated, to run again", ns)
		}
		return nil
	})
	hr := env.HelmRelease(t, cr)
	if len(hr.Status.NotLocked) != 1 || hr.Status.NotLocked[0].Reason != "Finished" {
		t.Errorf("notLocked = %+v, want the Job as Finished", hr.Status.NotLocked)
	}
}

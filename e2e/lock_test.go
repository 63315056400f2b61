package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// lockConfigMaps installs the configmaps chart with count ConfigMaps,
// registers the release and waits until it is locked.
func lockConfigMaps(t *testing.T, v framework.HelmVersion, ns, release string, count int) string {
	t.Helper()
	env.Helm(t, v, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", fmt.Sprintf("count=%d", count))
	cr := env.Register(t, ns, release)
	hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("state Deployed without Locked=True: %+v", hr.Status.Conditions)
	}
	return cr
}

func findCondition(hr *v1alpha1.HelmRelease, typ string) *metav1.Condition {
	for i := range hr.Status.Conditions {
		if hr.Status.Conditions[i].Type == typ {
			return &hr.Status.Conditions[i]
		}
	}
	return nil
}

// setKey overwrites data.key of a ConfigMap, as `kubectl edit` would.
func setKey(t *testing.T, ns, name, value string) string {
	t.Helper()
	patch := fmt.Sprintf(`{"data":{"key":%q}}`, value)
	obj, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"})
	if err != nil {
		t.Fatalf("editing ConfigMap %s/%s: %v", ns, name, err)
	}
	return obj.GetResourceVersion()
}

func keyOf(t *testing.T, ns, name string) (string, bool) {
	t.Helper()
	obj := env.Get(t, "v1", "configmaps", ns, name)
	if obj == nil {
		return "", false
	}
	v, _, _ := unstructured.NestedString(obj.Object, "data", "key")
	return v, true
}

// editStays edits data.key and checks for a while that the locker leaves
// the edit alone, because why says it must.
func editStays(t *testing.T, ns, name, value, why string) {
	t.Helper()
	setKey(t, ns, name, value)
	env.Consistently(t, 1500*time.Millisecond, func() error {
		if got, _ := keyOf(t, ns, name); got != value {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q, want the edit %q to stay: %s", ns, name, got, value, why)
		}
		return nil
	})
}

// editStaysOnceLetGo is editStays for a lock whose CR was just deleted.
// The locker lets go once its queue reaches the deletion, which under the
// parallel suite's load may take a moment, and an edit made before then
// is reverted: the edit is made again until one stays, for at most 10 s.
func editStaysOnceLetGo(t *testing.T, ns, name, value, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		setKey(t, ns, name, value)
		got, stayed := value, true
		for end := time.Now().Add(1500 * time.Millisecond); stayed && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			got, _ = keyOf(t, ns, name)
			stayed = got == value
		}
		if stayed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMap %s/%s data.key = %q 10 s on, want the edit %q to stay: %s", ns, name, got, value, why)
		}
	}
}

// lockCreatedChart installs the chart `helm create` makes as release
// "demo", registers it and waits until it is locked.
func lockCreatedChart(t *testing.T, v framework.HelmVersion, ns string) (chart, cr string) {
	t.Helper()
	chart = env.CreateChart(t, "web")
	env.Helm(t, v, "install", "demo", chart, "-n", ns)
	cr = env.Register(t, ns, "demo")
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	return chart, cr
}

func waitForKey(t *testing.T, ns, name, want string) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		got, ok := keyOf(t, ns, name)
		if !ok {
			return fmt.Errorf("ConfigMap %s/%s does not exist", ns, name)
		}
		if got != want {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q, want %q", ns, name, got, want)
		}
		return nil
	})
}

func TestRevertsConfigMapEdit(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			lockConfigMaps(t, v, ns, "cms", 1)
			before := env.Get(t, "v1", "configmaps", ns, "cms-0")
			setKey(t, ns, "cms-0", "drifted")
			waitForKey(t, ns, "cms-0", "declared")
			// The revert adds no labels or annotations of the locker's.
			after := env.Get(t, "v1", "configmaps", ns, "cms-0")
			if diff := cmp.Diff(before.GetLabels(), after.GetLabels()); diff != "" {
				t.Errorf("labels changed by the revert (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(before.GetAnnotations(), after.GetAnnotations()); diff != "" {
				t.Errorf("annotations changed by the revert (-before +after):\n%s", diff)
			}
		})
	}
}

func TestForeignLabelSurvivesRevert(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	lockConfigMaps(t, framework.Helm3, ns, "cms", 1)
	env.Kubectl(t, "label", "-n", ns, "configmap", "cms-0", "team=payments")
	setKey(t, ns, "cms-0", "drifted")
	waitForKey(t, ns, "cms-0", "declared")
	env.Consistently(t, time.Second, func() error {
		obj := env.Get(t, "v1", "configmaps", ns, "cms-0")
		if got := obj.GetLabels()["team"]; got != "payments" {
			return fmt.Errorf("foreign label team = %q after the revert, want payments", got)
		}
		return nil
	})
}

func TestRecreatesDeletedObjects(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			lockCreatedChart(t, v, ns)
			env.Kubectl(t, "delete", "-n", ns, "service/demo-web", "serviceaccount/demo-web", "deployment/demo-web", "--wait=false")
			env.Eventually(t, 30*time.Second, func() error {
				for _, o := range []struct{ apiVersion, resource string }{{"v1", "services"}, {"v1", "serviceaccounts"}, {"apps/v1", "deployments"}} {
					obj := env.Get(t, o.apiVersion, o.resource, ns, "demo-web")
					if obj == nil || obj.GetDeletionTimestamp() != nil {
						return fmt.Errorf("%s %s/demo-web not recreated", o.resource, ns)
					}
				}
				return nil
			})
			svc := env.Get(t, "v1", "services", ns, "demo-web")
			if got := svc.GetLabels()["app.kubernetes.io/instance"]; got != "demo" {
				t.Errorf("recreated Service has label app.kubernetes.io/instance=%q, want demo", got)
			}
		})
	}
}

// TestRevertsServiceOfCreatedChart uses the chart `helm create` makes,
// which sets no metadata.namespace: the locker must find the Service in
// the release namespace, and never create one in default.
func TestRevertsServiceOfCreatedChart(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	lockCreatedChart(t, framework.Helm3, ns)
	env.Kubectl(t, "patch", "-n", ns, "service", "demo-web", "--type", "merge", "-p", `{"spec":{"type":"NodePort"}}`)
	env.Eventually(t, 30*time.Second, func() error {
		svc := env.Get(t, "v1", "services", ns, "demo-web")
		if got, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); got != "ClusterIP" {
			return fmt.Errorf("Service type = %q, want ClusterIP", got)
		}
		return nil
	})
	if obj := env.Get(t, "v1", "services", "default", "demo-web"); obj != nil {
		t.Error("a Service demo-web appeared in namespace default")
	}
	if obj := env.Get(t, "apps/v1", "deployments", "default", "demo-web"); obj != nil {
		t.Error("a Deployment demo-web appeared in namespace default")
	}
}

// TestServicePortsRevertThenHelmUpgrade is the case in shared/NOTES.md: a
// naive revert of a drifted list entry leaves the restored entry owned by
// the locker, and Helm 4's next server-side apply then fails with a
// duplicate port. After the locker's revert, an upgrade with no force flag
// must succeed and leave exactly the new manifest's port.
func TestServicePortsRevertThenHelmUpgrade(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			chart, cr := lockCreatedChart(t, v, ns)

			env.Kubectl(t, "patch", "-n", ns, "service", "demo-web", "--type", "merge",
				"-p", `{"spec":{"ports":[{"port":81,"targetPort":"http","protocol":"TCP","name":"http"}]}}`)
			waitForPorts(t, ns, []int64{80})

			env.Helm(t, v, "upgrade", "demo", chart, "-n", ns, "--set", "service.port=8080")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			waitForPorts(t, ns, []int64{8080})
			env.Consistently(t, time.Second, func() error { return portsAre(t, ns, []int64{8080}) })
		})
	}
}

func portsAre(t *testing.T, ns string, want []int64) error {
	svc := env.Get(t, "v1", "services", ns, "demo-web")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var got []int64
	for _, p := range ports {
		got = append(got, p.(map[string]any)["port"].(int64))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Errorf("Service ports (-want +got):\n%s", diff)
	}
	return nil
}

func waitForPorts(t *testing.T, ns string, want []int64) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error { return portsAre(t, ns, want) })
}

func TestHelmUpgradeAndRollbackAreNotFought(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			cr := lockConfigMaps(t, v, ns, "cms", 2)

			env.Helm(t, v, "upgrade", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2,value=upgraded")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			waitForKey(t, ns, "cms-0", "upgraded")
			setKey(t, ns, "cms-1", "drifted")
			waitForKey(t, ns, "cms-1", "upgraded")

			env.Helm(t, v, "rollback", "cms", "1", "-n", ns)
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 3)
			waitForKey(t, ns, "cms-0", "declared")
			setKey(t, ns, "cms-0", "drifted")
			waitForKey(t, ns, "cms-0", "declared")
		})
	}
}

func TestUninstallIsNotResurrected(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			cr := lockConfigMaps(t, v, ns, "cms", 3)
			env.Helm(t, v, "uninstall", "cms", "-n", ns)
			env.WaitForState(t, cr, v1alpha1.StateSecretNotFound, 0)
			env.Consistently(t, 2*time.Second, func() error {
				for i := range 3 {
					if _, ok := keyOf(t, ns, fmt.Sprintf("cms-%d", i)); ok {
						return fmt.Errorf("ConfigMap cms-%d exists after helm uninstall", i)
					}
				}
				return nil
			})
		})
	}
}

func TestDeletingTheCRLeavesEditsAlone(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm3, ns, "cms", 1)
	if err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Delete(t.Context(), cr, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 10*time.Second, func() error {
		_, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Get(t.Context(), cr, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("HelmRelease %s still exists", cr)
		}
		return nil
	})
	editStaysOnceLetGo(t, ns, "cms-0", "edited after unregistering", "the CR was deleted")
}

func TestCRManagedByAnotherControllerIsLeftAlone(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns)
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.Kind,
		"metadata": map[string]any{
			"name": ns, "namespace": framework.RegistrationNamespace,
			"annotations": map[string]any{v1alpha1.ManagedByAnnotation: "someone-else"},
		},
		"spec": map[string]any{"release": map[string]any{"name": "cms", "namespace": ns}},
	}}
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Create(t.Context(), hr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setKey(t, ns, "cms-0", "edited")
	env.Consistently(t, 2*time.Second, func() error {
		if got, _ := keyOf(t, ns, "cms-0"); got != "edited" {
			return fmt.Errorf("data.key = %q: the locker reverted a release another controller manages", got)
		}
		if st := env.HelmRelease(t, ns).Status.State; st != "" {
			return fmt.Errorf("the locker wrote state %q on a CR another controller manages", st)
		}
		return nil
	})
}

// TestRegistrationClaimsUnannotatedCR checks the CR is annotated with the
// controller's name once served.
func TestRegistrationClaimsUnannotatedCR(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm3, ns, "cms", 1)
	if got := env.HelmRelease(t, cr).Annotations[v1alpha1.ManagedByAnnotation]; got != "helm-locker" {
		t.Errorf("annotation %s = %q, want helm-locker", v1alpha1.ManagedByAnnotation, got)
	}
}

// TestStatusIsTrue checks that the release's description and notes are
// reported and that the Locked condition names the revision.
func TestStatusIsTrue(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	cr := lockConfigMaps(t, framework.Helm4, ns, "cms", 4)
	hr := env.HelmRelease(t, cr)
	c := findCondition(hr, v1alpha1.ConditionLocked)
	if !strings.Contains(c.Message, "all 4 objects of revision 1") {
		t.Errorf("Locked message = %q, want it to count 4 objects of revision 1", c.Message)
	}
	if hr.Status.Description != "Install complete" {
		t.Errorf("description = %q, want Helm's %q", hr.Status.Description, "Install complete")
	}
	if hr.Status.ObservedGeneration != hr.Generation {
		t.Errorf("observedGeneration = %d, want %d", hr.Status.ObservedGeneration, hr.Generation)
	}
	out := env.Kubectl(t, "get", "helmreleases", "-n", framework.RegistrationNamespace, cr)
	for _, col := range []string{"RELEASE NAME", "RELEASE NAMESPACE", "VERSION", "STATE", "AGE", "Deployed"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get output lacks %q:\n%s", col, out)
		}
	}
}

// mustJSON is for building patches in tests.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustGVR(t *testing.T, apiVersion, resource string) schema.GroupVersionResource {
	t.Helper()
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		t.Fatal(err)
	}
	return gv.WithResource(resource)
}

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestMigrationFromRancher runs docs/migrating.md step by step. The old
// install is a chart in the shape of rancher/helm-locker's (its image
// cannot run here) and a HelmRelease as rancher/helm-locker leaves it:
// claimed by helm-locker, with its status fields only. registration
// stands for cattle-helm-system and apps for a release's namespace.
func TestMigrationFromRancher(t *testing.T) {
	t.Parallel()
	registration, apps := env.Namespace(t), env.Namespace(t)
	env.Helm(t, framework.Helm3, "install", "helm-locker", framework.Chart(t, "rancher-helm-locker"), "-n", registration)
	env.Helm(t, framework.Helm3, "install", "my-app", env.CreateChart(t, "my-app"), "-n", apps)
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.Kind,
		"metadata": map[string]any{"name": "my-app", "namespace": registration,
			"annotations": map[string]any{"helmreleases.cattle.io/managed-by": "helm-locker"}},
		"spec": map[string]any{"release": map[string]any{"name": "my-app", "namespace": apps}},
	}}
	crs := env.Dynamic.Resource(v1alpha1.Resource).Namespace(registration)
	created, err := crs.Create(t.Context(), hr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"state": "Deployed", "version": int64(1), "description": "Install complete"}
	if _, err := crs.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	oldSpec := created.Object["spec"]

	// 1. Look at what you have.
	if out := env.Helm(t, framework.Helm3, "-n", registration, "list"); !strings.Contains(out, "helm-locker") {
		t.Fatalf("step 1: helm list does not show the old chart:\n%s", out)
	}
	env.Kubectl(t, "-n", registration, "get", "helmreleases")
	env.Kubectl(t, "get", "crd", "helmreleases.helm.cattle.io", "-o", `jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}{"\n"}`)

	// 2. Apply the new CRDs.
	env.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(operatorChart(t), "crds"))

	// 3. Choose the identity the locks write with.
	env.Kubectl(t, "-n", apps, "create", "serviceaccount", "helm-locker-writer")
	env.Kubectl(t, "-n", apps, "create", "rolebinding", "helm-locker-writer", "--clusterrole=admin", "--serviceaccount="+apps+":helm-locker-writer")

	// 4. Install the new chart beside the old one.
	startChartLocker(t, registration, "helm-locker-v2")

	// 5. Wait until it holds every release.
	if out, err := env.KubectlE(t, "-n", registration, "wait", "helmreleases", "--all", "--for=condition=Locked", "--timeout=60s"); err != nil {
		t.Fatalf("step 5: %v\n%s", err, out)
	}
	got := env.HelmReleaseIn(t, registration, "my-app")
	if got.Status.State != v1alpha1.StateDeployed || got.Annotations["helmreleases.cattle.io/managed-by"] != "helm-locker" {
		t.Errorf("step 5: state %q, claim %q: want Deployed, claimed by helm-locker", got.Status.State, got.Annotations["helmreleases.cattle.io/managed-by"])
	}

	// 6. Remove the old chart and its cluster-admin binding.
	oldBinding := regexp.MustCompile(`cluster-admin.*\b` + registration + `/helm-locker(\s|$)`)
	if out := env.Kubectl(t, "get", "clusterrolebindings", "-o", "wide"); !oldBinding.MatchString(out) {
		t.Fatalf("step 6: before the uninstall, no cluster-admin binding lists the old locker's ServiceAccount:\n%s", out)
	}
	env.Helm(t, framework.Helm3, "-n", registration, "uninstall", "helm-locker")
	if out := env.Kubectl(t, "get", "clusterrolebindings", "-o", "wide"); oldBinding.MatchString(out) {
		t.Errorf("step 6: the old locker's ServiceAccount is still bound to cluster-admin:\n%s", out)
	}

	// 7. Check: the CR, unchanged, still locks its release.
	env.Kubectl(t, "-n", registration, "get", "helmreleases")
	env.Kubectl(t, "-n", apps, "patch", "service", "my-app", "--type", "merge", "-p", `{"spec":{"type":"NodePort"}}`)
	env.Eventually(t, 30*time.Second, func() error {
		if typ := env.Kubectl(t, "-n", apps, "get", "service", "my-app", "-o", `jsonpath={.spec.type}`); typ != "ClusterIP" {
			return fmt.Errorf("step 7: Service my-app type = %q, want ClusterIP", typ)
		}
		return nil
	})
	after, err := crs.Get(t.Context(), "my-app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after.Object["spec"]) != fmt.Sprint(oldSpec) {
		t.Errorf("the CR's spec changed: %v, was %v", after.Object["spec"], oldSpec)
	}
}

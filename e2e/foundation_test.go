package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestHelmInstallsCreatedChart proves the harness end to end: each real helm
// CLI installs the chart `helm create` makes, Helm's release Secret is where
// the locker will look for it, and the chart's objects, which set no
// metadata.namespace, land in the release namespace.
func TestHelmInstallsCreatedChart(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			chart := env.CreateChart(t, "web")
			env.Helm(t, v, "install", "demo", chart, "--namespace", ns)

			secret, err := env.Kube.CoreV1().Secrets(ns).Get(t.Context(), "sh.helm.release.v1.demo.v1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("release Secret: %v", err)
			}
			if got, want := string(secret.Type), "helm.sh/release.v1"; got != want {
				t.Errorf("release Secret type = %q, want %q", got, want)
			}
			wantLabels := map[string]string{"owner": "helm", "name": "demo", "status": "deployed", "version": "1"}
			gotLabels := map[string]string{}
			for k := range wantLabels {
				gotLabels[k] = secret.Labels[k]
			}
			if diff := cmp.Diff(wantLabels, gotLabels); diff != "" {
				t.Errorf("release Secret labels (-want +got):\n%s", diff)
			}
			if len(secret.Data["release"]) == 0 {
				t.Error("release Secret has no .data.release")
			}

			if _, err := env.Kube.CoreV1().Services(ns).Get(t.Context(), "demo-web", metav1.GetOptions{}); err != nil {
				t.Errorf("Service demo-web in %s: %v", ns, err)
			}
			if _, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "demo-web", metav1.GetOptions{}); err != nil {
				t.Errorf("Deployment demo-web in %s: %v", ns, err)
			}
			if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Get(t.Context(), "demo-web", metav1.GetOptions{}); err != nil {
				t.Errorf("ServiceAccount demo-web in %s: %v", ns, err)
			}
			if _, err := env.Kube.CoreV1().Services("default").Get(t.Context(), "demo-web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("Service demo-web in default: want NotFound, got %v", err)
			}
			list := env.Helm(t, v, "list", "--namespace", ns, "--short")
			if got := strings.TrimSpace(list); got != "demo" {
				t.Errorf("helm list = %q, want %q", got, "demo")
			}
		})
	}
}

// TestControlPlaneVersion checks that kube-apiserver was built with version
// ldflags: without them it reports v0.0.0-master and helm rejects charts
// with a kubeVersion constraint.
func TestControlPlaneVersion(t *testing.T) {
	t.Parallel()
	info, err := env.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.Major != "1" || !strings.HasPrefix(info.GitVersion, "v1.36.") {
		t.Errorf("server version = %s (major %q), want v1.36.x", info.GitVersion, info.Major)
	}
}

// TestToolsAreCached runs hack/tools.sh a second time and fails if it
// rebuilds anything: the first build takes minutes and must happen once.
func TestToolsAreCached(t *testing.T) {
	t.Parallel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", root+"/hack/tools.sh")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/tools.sh: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "building") {
		t.Errorf("hack/tools.sh rebuilt a cached tool:\n%s", stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), env.Tools.Dir; got != want {
		t.Errorf("hack/tools.sh printed %q, want the cached folder %q", got, want)
	}
}

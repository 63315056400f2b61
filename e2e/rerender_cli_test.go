package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestDiffRerender runs `helm-locker diff --rerender` as a user types it,
// on a release of the two-way chart installed by each helm CLI: its
// ConfigMap copies the greeting of a settings ConfigMap it looks up, and
// its Secrets hold a CA generated at every render.
func TestDiffRerender(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			release := "greeter"
			setGreeting(t, ns, "hello")
			env.Helm(t, v, "install", release, framework.Chart(t, "two-way"), "-n", ns, "--set", "credentials.enabled=true")

			// Just installed, the chart renders as stored: the
			// password it generates anew is no change. No lock
			// verified the release, and diff says so.
			unverified := "Warning: no HelmRelease you may read locks release " + ns + "/" + release + ", so nothing verified its revision 1"
			if res := env.CLI(t, "", "diff", "--rerender", "-n", ns, release); res.Code != 0 || res.Stdout != "" || !strings.HasPrefix(res.Stderr, unverified) {
				t.Fatalf("diff --rerender of a release just installed: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
			}

			// The settings it looks up change: the render differs
			// where the greeting goes, and nowhere else.
			setGreeting(t, ns, "bonjour")
			res := env.CLI(t, "", "diff", "--rerender", "-n", ns, release)
			app := release + "-two-way"
			head := "# ConfigMap " + ns + "/" + app + ": renders differently at /data/app.ini, /data/greeting\n"
			want := []string{head, "--- " + app + " (stored)\n", "+++ " + app + " (rendered now)\n", "-  greeting: hello\n", "+  greeting: bonjour\n", "-    greeting = hello\n", "+    greeting = bonjour\n"}
			if res.Code != 1 || !containsAll(res.Stdout, want) || strings.Count(res.Stdout, "\n# ") != 0 || strings.Contains(res.Stdout, "Secret") || !strings.HasPrefix(res.Stderr, unverified) {
				t.Errorf("diff --rerender after the settings changed: exit %d, want 1 and one ConfigMap with %q\nstdout:\n%s\nstderr:\n%s", res.Code, want, res.Stdout, res.Stderr)
			}

			// It wrote nothing: Helm's release is as it was.
			if out := env.Helm(t, v, "get", "manifest", release, "-n", ns); !strings.Contains(out, `greeting: "hello"`) {
				t.Errorf("the stored manifest changed:\n%s", out)
			}
		})
	}

	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"diff", "--rerender", "--bogus", "greeter"},
			{"diff", "--rerender"},
			{"diff", "--rerender", "-f", "app.yaml"},
		} {
			if res := env.CLI(t, "", args...); res.Code != 2 || !strings.Contains(res.Stderr, "See 'helm-locker diff --help' for usage.") {
				t.Errorf("%s: exit %d, want 2\nstderr:\n%s", strings.Join(args, " "), res.Code, res.Stderr)
			}
		}
	})

	// The chart's lookups read with the user's credentials: a user who
	// may read the release, but not the ConfigMap the chart looks up,
	// learns which lookup was refused, and nothing of the render.
	t.Run("forbidden lookup", func(t *testing.T) {
		t.Parallel()
		ns := env.Namespace(t)
		setGreeting(t, ns, "hello")
		env.Helm(t, framework.Helm4, "install", "greeter", framework.Chart(t, "two-way"), "-n", ns, "--set", "credentials.enabled=true")
		kubeconfig := releaseReaderKubeconfig(t, ns)
		var res framework.CLIResult
		env.Eventually(t, 30*time.Second, func() error {
			// RBAC's authorizer sees the new binding a moment later.
			res = env.CLI(t, "", "diff", "--rerender", "-n", ns, "greeter", "--kubeconfig", kubeconfig)
			if strings.Contains(res.Stderr, "listing the revisions") {
				return fmt.Errorf("the reader may not list Secrets yet: %s", res.Stderr)
			}
			return nil
		})
		if want := "lookup of ConfigMap " + ns + "/settings: configmaps \"settings\" is forbidden"; res.Code != 2 || res.Stdout != "" || !strings.Contains(res.Stderr, want) {
			t.Errorf("diff --rerender by a user who may not read the settings: exit %d, want 2 and %q\nstdout:\n%s\nstderr:\n%s", res.Code, want, res.Stdout, res.Stderr)
		}
	})
}

// releaseReaderKubeconfig is a kubeconfig of a ServiceAccount of ns that
// may read Secrets there, and so the release, but no ConfigMap.
func releaseReaderKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	const name = "release-reader"
	if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return serviceAccountKubeconfig(t, ns, name)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

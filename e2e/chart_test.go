package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// operatorChart is the operator's own Helm chart.
func operatorChart(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "chart", "helm-locker")
}

// TestChartLintsAndApplies: both helm CLIs lint the chart, and what it
// renders, CRDs included, passes the API server's validation in a
// server-side dry run, with the default values, with every optional
// object but the ServiceMonitor (whose CRD this control plane lacks), and
// in shards.
func TestChartLintsAndApplies(t *testing.T) {
	t.Parallel()
	chart := operatorChart(t)
	for _, v := range []framework.HelmVersion{framework.Helm3, framework.Helm4} {
		for _, args := range [][]string{nil, {"--set", "shards={a,b},selfLock.enabled=true"}} {
			if out, err := env.HelmE(t, v, append([]string{"lint", "--strict", chart}, args...)...); err != nil {
				t.Errorf("helm %s lint %v: %v\n%s", v, args, err, out)
			}
		}
	}
	ns := env.Namespace(t)
	for _, set := range []string{"", "selfLock.enabled=true,installCRDs=true,webhook.certSecret=tls,podDisruptionBudget.enabled=true", "rbac.writeAll=true,webhook.enabled=false,metrics.enabled=false",
		"shards={a,b},selfLock.enabled=true"} {
		args := []string{"template", "dry-run", chart, "-n", ns, "--include-crds"}
		if set != "" {
			args = append(args, "--set", set)
		}
		manifest := env.Helm(t, framework.Helm4, args...)
		path := filepath.Join(t.TempDir(), "chart.yaml")
		if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := env.KubectlE(t, "apply", "--dry-run=server", "-f", path)
		if err != nil {
			t.Errorf("values %q: kubectl apply --dry-run=server: %v\n%s", set, err, out)
			continue
		}
		for _, kind := range []string{"deployment.apps", "clusterrole.rbac.authorization.k8s.io", "service/helm-locker-webhook"} {
			if kind == "service/helm-locker-webhook" && strings.Contains(set, "webhook.enabled=false") {
				continue
			}
			if !strings.Contains(out, kind) {
				t.Errorf("values %q: the dry run applied no %s:\n%s", set, kind, out)
			}
		}
	}
}

// TestChartRunsWithLeastPrivilege installs the chart, then runs the locker
// as the chart's ServiceAccount with the args of the chart's Deployment
// (pods do not run here): the default RBAC, which reads named kinds only
// and impersonates named ServiceAccounts only, must be enough.
//   - A release whose HelmRelease names a ServiceAccount with a namespaced
//     Role (listed in rbac.impersonate.serviceAccounts) is locked, and an
//     edit is reverted.
//   - A release whose identity (--default-service-account, which the chart
//     sets) may write nothing says Forbidden, and its edit stays.
//   - selfLock: the chart's own Deployment and ClusterRole are held.
//   - A release holding a custom resource, whose kind the chart does not
//     let the locker read, says WatchForbidden and names the type.
//   - No other list or watch of the locker's is refused.
func TestChartRunsWithLeastPrivilege(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	// Cluster-scoped names come from the release's, so it is unique.
	fullname := registration + "-helm-locker"
	locker := startChartLocker(t, registration, registration, "--set", "selfLock.enabled=true,rbac.impersonate.serviceAccounts={deployer}")

	// The admin's lines for a namespace, as docs/getting-started.md gives them but
	// with edit, the narrower ClusterRole that kube-controller-manager
	// aggregates: enough for the chart's Service, ServiceAccount and
	// Deployment.
	allowed := env.Namespace(t)
	env.Kubectl(t, "-n", allowed, "create", "serviceaccount", "deployer")
	env.Kubectl(t, "-n", allowed, "create", "rolebinding", "deployer", "--clusterrole=edit", "--serviceaccount="+allowed+":deployer")
	env.Helm(t, framework.Helm3, "install", "web", env.CreateChart(t, "web"), "-n", allowed)
	web := env.RegisterWith(t, registration, allowed, "web", map[string]any{"serviceAccountName": "deployer"})

	denied := env.Namespace(t)
	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "guarded"), "-n", denied)
	app := env.RegisterIn(t, registration, denied, "app")

	custom := env.Namespace(t)
	group := custom + ".example.com"
	env.Helm(t, framework.Helm3, "install", "widgets", framework.Chart(t, "crds"), "-n", custom, "--set", "group="+group)
	env.Helm(t, framework.Helm3, "upgrade", "widgets", framework.Chart(t, "crds"), "-n", custom, "--set", "group="+group+",widget=true")
	widgets := env.RegisterIn(t, registration, custom, "widgets")

	env.WaitForStateIn(t, registration, web, v1alpha1.StateDeployed, 1)
	env.WaitForStateIn(t, registration, fullname, v1alpha1.StateDeployed, 1)

	env.Kubectl(t, "patch", "-n", allowed, "service", "web", "--type", "merge", "-p", `{"spec":{"type":"NodePort"}}`)
	env.Kubectl(t, "scale", "-n", registration, "deployment", fullname, "--replicas=5")
	env.Kubectl(t, "patch", "clusterrole", fullname, "--type", "json", "-p", `[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["configmaps"],"verbs":["delete"]}}]`)
	env.Eventually(t, 30*time.Second, func() error {
		svc := env.Get(t, "v1", "services", allowed, "web")
		if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ClusterIP" {
			return fmt.Errorf("Service web type = %q, want ClusterIP", typ)
		}
		d := env.Get(t, "apps/v1", "deployments", registration, fullname)
		if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 2 {
			return fmt.Errorf("the locker's own Deployment has %d replicas, want 2", n)
		}
		role := env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", fullname)
		if rules, _, _ := unstructured.NestedSlice(role.Object, "rules"); strings.Contains(fmt.Sprint(rules), "delete") {
			return fmt.Errorf("the locker's ClusterRole still grants the added delete: %v", rules)
		}
		return nil
	})

	setKey(t, denied, "app-config", "drifted")
	identity := "system:serviceaccount:" + denied + ":helm-locker-writer"
	env.Eventually(t, 30*time.Second, func() error {
		c := findCondition(env.HelmReleaseIn(t, registration, app), v1alpha1.ConditionLocked)
		if c == nil || c.Status != "False" || c.Reason != "Forbidden" || !strings.Contains(c.Message, identity) {
			return fmt.Errorf("HelmRelease %s Locked = %+v, want False/Forbidden naming %s", app, c, identity)
		}
		return nil
	})
	if got, _ := keyOf(t, denied, "app-config"); got != "drifted" {
		t.Errorf("ConfigMap app-config data.key = %q: written by an identity that may not write it", got)
	}

	env.Eventually(t, 30*time.Second, func() error {
		c := findCondition(env.HelmReleaseIn(t, registration, widgets), v1alpha1.ConditionLocked)
		if c == nil || c.Status != "False" || c.Reason != "WatchForbidden" || !strings.Contains(c.Message, "widgets."+group) {
			return fmt.Errorf("HelmRelease %s Locked = %+v, want False/WatchForbidden naming widgets.%s", widgets, c, group)
		}
		return nil
	})

	log, err := os.ReadFile(locker.Log)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, line := range regexp.MustCompile(`(?m)^.*cannot (list|watch) .*$`).FindAllString(string(log), -1) {
		if !strings.Contains(line, group) && len(refused) < 5 {
			refused = append(refused, line)
		}
	}
	if len(refused) > 0 {
		t.Errorf("the locker was refused reads with the chart's ClusterRole:\n%s", strings.Join(refused, "\n"))
	}
}

// startChartLocker installs the chart as release in registration, then
// runs the locker as the chart's ServiceAccount with the args of the
// chart's Deployment (pods do not run here), until the test ends. Only
// what must differ beside other lockers on one host and control plane is
// overridden: ports of its own, the webhook called on loopback, and no
// tenant ManifestLocks, which the shared locker serves.
func startChartLocker(t *testing.T, registration, release string, helmArgs ...string) *framework.Locker {
	t.Helper()
	env.Helm(t, framework.Helm4, append([]string{"install", release, operatorChart(t), "-n", registration}, helmArgs...)...)
	fullname := chartFullname(release)
	return runChartDeployment(t, registration, release, fullname, fullname)
}

// chartFullname is the name the chart gives its objects in release.
func chartFullname(release string) string {
	if strings.Contains(release, "helm-locker") {
		return release
	}
	return release + "-helm-locker"
}

// runChartDeployment runs, as the locker name, the locker of the chart's
// Deployment in registration as its ServiceAccount would (see
// startChartLocker).
func runChartDeployment(t *testing.T, registration, name, deployment, serviceAccount string) *framework.Locker {
	t.Helper()
	return runChartDeploymentOf(t, env.LockerBinary(), registration, name, deployment, serviceAccount)
}

// runChartDeploymentOf is runChartDeployment with the binary bin, such as
// one taken out of the image the Deployment names.
func runChartDeploymentOf(t *testing.T, bin, registration, name, deployment, serviceAccount string) *framework.Locker {
	t.Helper()
	deploy := env.Get(t, "apps/v1", "deployments", registration, deployment)
	if deploy == nil {
		t.Fatalf("the chart made no Deployment %s", deployment)
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	container := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(container, "args")
	if len(args) == 0 {
		t.Fatal("the chart's container has no args")
	}
	webhookAddr := framework.FreeAddress(t)
	args = append(args, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--tenant-manifest-locks=false",
		"--webhook-bind-address="+webhookAddr, "--webhook-url=https://"+webhookAddr+"/validate", "--v=4")
	locker, err := env.StartLockerBinary(name, bin, serviceAccountKubeconfig(t, registration, serviceAccount), containerEnv(t, container), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = locker.Stop(10 * time.Second)
		if t.Failed() {
			log, _ := os.ReadFile(locker.Log)
			lines := strings.Split(string(log), "\n")
			t.Logf("the log of the locker %s, last lines:\n%s", name, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	return locker
}

// containerEnv is the environment the kubelet would give container, in
// a pod on the node "e2e-node"; a source this suite cannot give fails the
// test.
func containerEnv(t *testing.T, container map[string]any) []string {
	t.Helper()
	vars, _, _ := unstructured.NestedSlice(container, "env")
	var env []string
	for _, v := range vars {
		v := v.(map[string]any)
		name, _, _ := unstructured.NestedString(v, "name")
		value, _, _ := unstructured.NestedString(v, "value")
		if field, ok, _ := unstructured.NestedString(v, "valueFrom", "fieldRef", "fieldPath"); ok {
			if field != "spec.nodeName" {
				t.Fatalf("the chart's container takes %s from %s, which this suite does not give", name, field)
			}
			value = "e2e-node"
		} else if _, ok := v["valueFrom"]; ok {
			t.Fatalf("the chart's container takes %s from %v, which this suite does not give", name, v["valueFrom"])
		}
		env = append(env, name+"="+value)
	}
	return env
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount ns/name: what a pod running as it may do.
func serviceAccountKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	token := strings.TrimSpace(env.Kubectl(t, "create", "token", name, "-n", ns, "--duration=1h"))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: env.CP.Config.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa"}
	kc.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

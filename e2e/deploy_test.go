package e2e

import (
	"fmt"
	"path/filepath"
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

// TestDeployManifestsGrantEnough applies deploy/ to the API server, then
// runs a second locker as the ServiceAccount it creates, in a registration
// namespace of its own. If the ClusterRole lacks a permission, the lock
// never settles or the revert fails.
func TestDeployManifestsGrantEnough(t *testing.T) {
	t.Parallel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(root, "deploy")
	env.Kubectl(t, "apply", "-f", filepath.Join(deploy, "crds"), "-f", filepath.Join(deploy, "rbac.yaml"), "-f", filepath.Join(deploy, "deployment.yaml"))
	token := strings.TrimSpace(env.Kubectl(t, "create", "token", "helm-locker", "-n", "cattle-helm-system"))

	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: env.CP.Config.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa"}
	kc.CurrentContext = "local"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	ns := env.Namespace(t)
	registration := env.Namespace(t)
	locker, err := env.StartLocker("rbac-locker", "--kubeconfig", kubeconfig, "--namespace", registration, "--controller-name", "rbac-locker")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()

	env.Helm(t, framework.Helm4, "install", "web", env.CreateChart(t, "web"), "-n", ns)
	env.Helm(t, framework.Helm3, "install", "crds", framework.Chart(t, "crds"), "-n", ns, "--set", "group="+ns+".example.com")
	for _, release := range []string{"web", "crds"} {
		cr := env.RegisterIn(t, registration, ns, release)
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	}
	env.Kubectl(t, "patch", "-n", ns, "service", "web", "--type", "merge", "-p", `{"spec":{"type":"NodePort"}}`)
	env.Kubectl(t, "delete", "clusterrole", "crds-reader")
	env.Eventually(t, 30*time.Second, func() error {
		svc := env.Get(t, "v1", "services", ns, "web")
		if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ClusterIP" {
			return fmt.Errorf("Service type = %q, want ClusterIP", typ)
		}
		if env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", "crds-reader") == nil {
			return fmt.Errorf("ClusterRole crds-reader not recreated")
		}
		return nil
	})
}

package e2e

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// storeRelease writes revision 1 of a release holding manifest, deployed,
// as Helm's Secret driver stores it: a release no helm CLI would install,
// which the first lock trusts all the same.
func storeRelease(t *testing.T, ns, name, manifest string) {
	t.Helper()
	rel := map[string]any{"name": name, "namespace": ns, "version": 1, "manifest": manifest,
		"info": map[string]any{"status": "deployed", "description": "Install complete"}}
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + name + ".v1", Labels: map[string]string{"owner": "helm", "name": name, "status": "deployed", "version": "1"}},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"release": encodeRelease(t, rel)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidReleaseKeyIsRefusedAtAdmission: a typo in the release's
// namespace is an error when the CR is created, not a missing release.
func TestInvalidReleaseKeyIsRefusedAtAdmission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ field, name, namespace string }{
		{"spec.release.namespace", "app", "Not_A-Valid.NS!"},
		{"spec.release.name", "My_App", "apps"},
	} {
		hr := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
			"metadata": map[string]any{"generateName": "invalid-", "namespace": framework.RegistrationNamespace},
			"spec":     map[string]any{"release": map[string]any{"name": tc.name, "namespace": tc.namespace}},
		}}
		_, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Create(t.Context(), hr, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("creating a HelmRelease with %s %q/%q: %v; want it refused, naming %s", tc.field, tc.namespace, tc.name, err, tc.field)
		}
	}
}

// apiServerRequests reads kube-apiserver's count of requests of verb on
// resource that ended with code.
func apiServerRequests(t *testing.T, verb, resource string, code int) int {
	t.Helper()
	body, err := env.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	scanner := bufio.NewScanner(strings.NewReader(string(body)))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") ||
			!strings.Contains(line, `code="`+strconv.Itoa(code)+`"`) || !strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `verb="`+verb+`"`) {
			continue
		}
		n, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		total += int(n)
	}
	return total
}

// TestRejectedObjectsAreReportedOnce: objects the API server can never
// accept are reported with their reason and not resent in a loop, while
// the rest of the release is locked.
func TestRejectedObjectsAreReportedOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	missing := ns + "-missing"
	storeRelease(t, ns, "rejects", fmt.Sprintf(`---
apiVersion: v1
kind: ConfigMap
metadata:
  name: good
data:
  key: declared
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: Bad_Name
data:
  key: declared
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: elsewhere
  namespace: %s
data:
  key: declared
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: huge
data:
  key: %s
`, missing, strings.Repeat("x", 5<<20)))
	cr := env.Register(t, ns, "rejects")
	want := map[string]string{
		"ConfigMap " + ns + "/Bad_Name":       "Invalid",
		"ConfigMap " + missing + "/elsewhere": "NamespaceNotFound",
		"ConfigMap " + ns + "/huge":           "TooLarge",
	}
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmRelease(t, cr)
		got := map[string]string{}
		for _, p := range hr.Status.NotLocked {
			got[p.Object] = p.Reason
		}
		for o, reason := range want {
			if got[o] != reason {
				return fmt.Errorf("status.notLocked = %+v, want %s as %s", hr.Status.NotLocked, o, reason)
			}
		}
		if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Locked = %+v, want False", c)
		}
		return nil
	})
	setKey(t, ns, "good", "drifted")
	waitForKey(t, ns, "good", "declared")

	counts := func() [3]int {
		return [3]int{apiServerRequests(t, "POST", "configmaps", 413), apiServerRequests(t, "POST", "configmaps", 422), apiServerRequests(t, "POST", "configmaps", 404)}
	}
	before := counts()
	for i, n := range before {
		if n == 0 {
			t.Fatalf("kube-apiserver counted no refused create %d (%v): the test cannot see the retries", i, before)
		}
	}
	// Everything else that happens to the release still syncs it.
	for i := range 5 {
		setKey(t, ns, "good", fmt.Sprintf("drifted %d", i))
		waitForKey(t, ns, "good", "declared")
		time.Sleep(time.Second)
	}
	if after := counts(); after != before {
		t.Errorf("refused creates (413, 422, 404) went from %v to %v within seconds; want them retried at most once a minute", before, after)
	}
	// Failures are reported in one event per reason and release (see
	// docs/attribution.md); each object must be named in exactly one report.
	named := map[string]int{}
	for _, ev := range env.Events(t, framework.RegistrationNamespace, cr) {
		if ev.Reason != "DriftCorrectionFailed" {
			continue
		}
		for o := range want {
			if strings.Contains(ev.Message, o+" ") {
				named[o] += max(int(ev.Count), 1)
			}
		}
	}
	for o := range want {
		if named[o] != 1 {
			t.Errorf("%s is reported in %d DriftCorrectionFailed events, want 1", o, named[o])
		}
	}
}

// TestDefaultServiceAccountBoundsWrites runs a locker that writes as each
// release's lock-writer ServiceAccount, bound to the ClusterRole edit in
// the release namespace: what an application team has in a real cluster,
// whose rules kube-controller-manager aggregates. It may write the
// release's ConfigMap, and nothing cluster-wide: recreating the release's
// ClusterRoleBinding is refused as Forbidden, naming the object, the verb
// and the identity; the ConfigMap is still held.
func TestDefaultServiceAccountBoundsWrites(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "lock-writer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lock-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "lock-writer", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	locker, err := env.StartLocker("sa-locker", "--namespace", registration, "--controller-name", "sa-locker",
		"--default-service-account", "lock-writer", "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()

	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "guarded"), "-n", ns, "--set", "binding=true")
	cr := env.RegisterIn(t, registration, ns, "app")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	binding := ns + "-app-viewer"
	env.Kubectl(t, "delete", "clusterrolebinding", binding)
	identity := "system:serviceaccount:" + ns + ":lock-writer"
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmReleaseIn(t, registration, cr)
		c := findCondition(hr, v1alpha1.ConditionLocked)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Forbidden" {
			return fmt.Errorf("Locked = %+v, want False/Forbidden", c)
		}
		for _, want := range []string{"ClusterRoleBinding " + binding, identity, "cannot create"} {
			if !strings.Contains(c.Message, want) {
				return fmt.Errorf("Locked message %q does not name %q", c.Message, want)
			}
		}
		return nil
	})
	absent(t, [4]string{"rbac.authorization.k8s.io/v1", "clusterrolebindings", "", binding})
	setKey(t, ns, "app-config", "drifted")
	waitForKey(t, ns, "app-config", "declared")
}

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// The tests here hold what the author of a ManifestLock in a tenant's
// namespace (outside the registration namespace) can and cannot do: the
// docs/trust.md's trust table names them.

// optIn makes ServiceAccount sa of ns, if it does not exist, and sets its
// helm-locker.io/manifest-locks annotation to locks, so that those
// ManifestLocks of ns may write as it (see mlv1.WritersAnnotation).
func optIn(t *testing.T, ns, sa, locks string) {
	t.Helper()
	accounts := env.Kube.CoreV1().ServiceAccounts(ns)
	_, err := accounts.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Annotations: map[string]string{mlv1.WritersAnnotation: locks}}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, mlv1.WritersAnnotation, locks)
		_, err = accounts.Patch(t.Context(), sa, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatalf("opting ServiceAccount %s/%s in for %q: %v", ns, sa, locks, err)
	}
}

// TestTenantLockWriterOptIn: a tenant's ManifestLock that names a
// ServiceAccount of its namespace far more powerful than its author
// (admin of the namespace) holds and writes nothing until that account
// opts in to it, says why on its status and in an event, and works once
// the annotation names it.
func TestTenantLockWriterOptIn(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "powerful"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "create", "rolebinding", "powerful-admin", "-n", ns, "--clusterrole=cluster-admin", "--serviceaccount="+ns+":powerful")
	manifest := configMapYAML("planted", "x") + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: planted-admin
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {kind: ServiceAccount, name: default, namespace: ` + ns + `}
`
	createManifestLock(t, ns, "app", map[string]any{"manifest": manifest, "serviceAccountName": "powerful"})
	ml := waitManifestLock(t, ns, "app", mlv1.StateError)
	ready := meta.FindStatusCondition(ml.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Reason != mlv1.ReasonWriterNotPermitted || !strings.Contains(ready.Message, "ServiceAccount "+ns+"/powerful") ||
		!strings.Contains(ready.Message, mlv1.WritersAnnotation+"=app") {
		t.Errorf("Ready condition %+v; want %s naming the ServiceAccount and the annotation to add", ready, mlv1.ReasonWriterNotPermitted)
	}
	if ml.Status.LockedObjects != 0 {
		t.Errorf("status says %d objects locked; want none", ml.Status.LockedObjects)
	}
	env.Eventually(t, 10*time.Second, func() error {
		for _, e := range env.Events(t, ns, "app") {
			if e.Type == corev1.EventTypeWarning && e.Reason == mlv1.ReasonWriterNotPermitted && strings.Contains(e.Message, mlv1.WritersAnnotation) {
				return nil
			}
		}
		return errors.New("no WriterNotPermitted Warning event on the lock")
	})
	nothingWritten := func() error {
		if _, ok := keyOf(t, ns, "planted"); ok {
			return errors.New("the lock wrote its ConfigMap as a ServiceAccount that did not opt in")
		}
		if env.Get(t, "rbac.authorization.k8s.io/v1", "rolebindings", ns, "planted-admin") != nil {
			return errors.New("the lock wrote its RoleBinding as a ServiceAccount that did not opt in")
		}
		return nil
	}
	env.Consistently(t, 2*time.Second, nothingWritten)

	// An annotation naming another lock is no opt-in for this one.
	optIn(t, ns, "powerful", "other, app2")
	env.Consistently(t, 2*time.Second, nothingWritten)

	// Named, the lock writes as the account.
	optIn(t, ns, "powerful", "other,app")
	ml = waitManifestLock(t, ns, "app", mlv1.StateLocked)
	if ml.Status.LockedObjects != 2 {
		t.Errorf("status says %d objects locked once the account opted in; want 2", ml.Status.LockedObjects)
	}
	waitKey(t, ns, "planted", "x")
}

// roleBindingChart writes a chart of one RoleBinding, binding ClusterRole
// view to the ServiceAccounts .Values.subjects names, and returns its
// folder.
func roleBindingChart(t *testing.T) string {
	t.Helper()
	return writeChart(t, "access", map[string]string{
		"values.yaml": "subjects: [alice]\n",
		"templates/rolebinding.yaml": `apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: viewers
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: view
subjects:
{{- range .Values.subjects }}
- kind: ServiceAccount
  name: {{ . }}
  namespace: {{ $.Release.Namespace }}
{{- end }}
`,
	})
}

// aliceBinding is a RoleBinding, name, of ClusterRole role to the
// ServiceAccount alice of ns, as a manifest declares it.
func aliceBinding(name, role, ns string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: %s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %s}
subjects:
- {kind: ServiceAccount, name: alice, namespace: %s}
`, name, role, ns)
}

// writeChart writes chart name, with files beside its Chart.yaml, into a
// folder of the test's, and returns the folder.
func writeChart(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	files["Chart.yaml"] = "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n"
	for file, text := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTenantLockCannotFreezeAdminRelease: an admin installs, with real
// Helm, a chart whose RoleBinding lives in a tenant's namespace. A tenant's
// Prevent ManifestLock that declares the same RoleBinding, created before
// the release's HelmRelease (before the install, or after it), holds
// nothing of it: its writer may only write ConfigMaps, and Helm installed
// it. The admin's kubectl delete of the RoleBinding (revoking access) and
// helm upgrade both succeed, and the tenant's lock says why it does not
// hold the RoleBinding, while it holds its own ConfigMap in Prevent mode.
func TestTenantLockCannotFreezeAdminRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v framework.HelmVersion
		// lockFirst creates the tenant's lock before the install.
		lockFirst bool
	}{{framework.Helm3, true}, {framework.Helm4, false}} {
		name := tc.v.String() + "/installed after the lock"
		if !tc.lockFirst {
			name = tc.v.String() + "/installed before the lock"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			chart := roleBindingChart(t)
			grantConfigMaps(t, ns, "writer")
			optIn(t, ns, "writer", "*")
			// The tenant's lock declares the release's RoleBinding as the
			// chart renders it, beside a ConfigMap of its own.
			manifest := configMapYAML("own", "declared") + "---\n" + aliceBinding("viewers", "view", ns)
			lock := func() {
				createManifestLock(t, ns, "freeze", map[string]any{"manifest": manifest, "mode": "Prevent", "serviceAccountName": "writer"})
			}
			if tc.lockFirst {
				lock()
				waitKey(t, ns, "own", "declared")
			}
			env.Helm(t, tc.v, "install", "access", chart, "-n", ns)
			if !tc.lockFirst {
				lock()
				waitKey(t, ns, "own", "declared")
			}
			waitForRules(t, "configmaps")
			cr := env.Register(t, ns, "access")

			// The admin revokes access; the release's own lock
			// recreates the RoleBinding (it is Enforce), the tenant's
			// never stops either.
			env.Kubectl(t, "-n", ns, "delete", "rolebinding", "viewers")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			env.Eventually(t, 10*time.Second, func() error {
				if env.Get(t, "rbac.authorization.k8s.io/v1", "rolebindings", ns, "viewers") == nil {
					return errors.New("the HelmRelease did not recreate the RoleBinding")
				}
				return nil
			})
			env.Helm(t, tc.v, "upgrade", "access", chart, "-n", ns, "--set", "subjects={alice,bob}")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			rb := env.Get(t, "rbac.authorization.k8s.io/v1", "rolebindings", ns, "viewers")
			subjects, _, _ := unstructured.NestedSlice(rb.Object, "subjects")
			if len(subjects) != 2 {
				t.Errorf("RoleBinding subjects after the upgrade: %v; want alice and bob", subjects)
			}
			if _, marked := rb.GetAnnotations()[mlv1.MarkerAnnotation]; marked {
				t.Errorf("the RoleBinding carries the tenant lock's marker: %v", rb.GetAnnotations())
			}

			// The tenant's lock says why it does not hold the RoleBinding.
			env.Eventually(t, 30*time.Second, func() error {
				ml := getManifestLock(t, ns, "freeze")
				for _, p := range ml.Status.NotLocked {
					if p.Object == "RoleBinding "+ns+"/viewers" && p.Reason == mlv1.ReasonInstalledByHelm && strings.Contains(p.Message, "Helm release "+ns+"/access") {
						return nil
					}
				}
				return fmt.Errorf("ManifestLock %s/freeze: notLocked %+v, conditions %+v; want RoleBinding %s/viewers as %s, naming the release",
					ns, ml.Status.NotLocked, ml.Status.Conditions, ns, mlv1.ReasonInstalledByHelm)
			})

			// What the tenant's lock may hold, it holds, in Prevent mode.
			denied(t, []string{"ConfigMap " + ns + "/own is locked by ManifestLock " + ns + "/freeze"}, "-n", ns, "patch", "configmap", "own", "--type=merge", "-p", `{"data":{"key":"edited"}}`)
			ml := getManifestLock(t, ns, "freeze")
			if locked := slices.IndexFunc(ml.Status.Conditions, func(c metav1.Condition) bool {
				return c.Type == v1alpha1.ConditionLocked && c.Status == metav1.ConditionFalse && c.Reason == mlv1.ReasonInstalledByHelm
			}); locked < 0 {
				t.Errorf("conditions %+v; want Locked=False, reason %s: the lock does not hold all it declares", ml.Status.Conditions, mlv1.ReasonInstalledByHelm)
			}
		})
	}
}

// TestTenantLockAdoptsOnlyWhatItsWriterMayWrite: an object that exists
// without the lock's marker is adopted only if the lock's writer may write
// it (a server-side dry run as the writer). An admin's RoleBinding,
// created by hand, is not held and not frozen; the tenant's own
// ConfigMap, made by hand before the lock, is adopted and marked.
func TestTenantLockAdoptsOnlyWhatItsWriterMayWrite(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	grantConfigMaps(t, ns, "writer")
	optIn(t, ns, "writer", "adopt")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "admins", "--clusterrole=admin", "--serviceaccount="+ns+":alice")
	env.Kubectl(t, "-n", ns, "create", "configmap", "mine", "--from-literal=key=before")
	manifest := configMapYAML("mine", "declared") + "---\n" + aliceBinding("admins", "admin", ns)
	createManifestLock(t, ns, "adopt", map[string]any{"manifest": manifest, "mode": "Prevent", "serviceAccountName": "writer"})
	waitKey(t, ns, "mine", "declared")
	env.Eventually(t, 30*time.Second, func() error {
		ml := getManifestLock(t, ns, "adopt")
		for _, p := range ml.Status.NotLocked {
			if p.Object == "RoleBinding "+ns+"/admins" && p.Reason == mlv1.ReasonForbidden && strings.Contains(p.Message, "system:serviceaccount:"+ns+":writer") {
				return nil
			}
		}
		return fmt.Errorf("notLocked %+v; want RoleBinding %s/admins as %s, naming the writer", ml.Status.NotLocked, ns, mlv1.ReasonForbidden)
	})
	env.Eventually(t, 10*time.Second, func() error {
		for _, e := range env.Events(t, ns, "adopt") {
			if e.Type == corev1.EventTypeWarning && e.Reason == "NotAdopted" && strings.Contains(e.Message, "RoleBinding "+ns+"/admins") {
				return nil
			}
		}
		return errors.New("no NotAdopted Warning event names the RoleBinding")
	})
	if cm := env.Get(t, "v1", "configmaps", ns, "mine"); cm == nil || cm.GetAnnotations()[mlv1.MarkerAnnotation] != ns+"/adopt" {
		t.Errorf("the adopted ConfigMap does not carry the lock's marker: %v", cm)
	}
	rb := env.Get(t, "rbac.authorization.k8s.io/v1", "rolebindings", ns, "admins")
	if _, marked := rb.GetAnnotations()[mlv1.MarkerAnnotation]; marked {
		t.Errorf("the admin's RoleBinding carries the tenant lock's marker: %v", rb.GetAnnotations())
	}
	// The admin's RoleBinding is not frozen: it changes and goes.
	env.Kubectl(t, "-n", ns, "label", "rolebinding", "admins", "team=ops")
	env.Kubectl(t, "-n", ns, "delete", "rolebinding", "admins")
	env.Consistently(t, time.Second, func() error {
		if env.Get(t, "rbac.authorization.k8s.io/v1", "rolebindings", ns, "admins") != nil {
			return errors.New("the admin's deleted RoleBinding came back")
		}
		return nil
	})
}

// configMapChart writes a chart of one ConfigMap, name, whose data.key is
// value, and returns its folder.
func configMapChart(t *testing.T, name, value string) string {
	t.Helper()
	return writeChart(t, name, map[string]string{"templates/configmap.yaml": configMapYAML(name, value)})
}

// TestTenantLockNeverWritesOverHelm: a tenant's lock, whose writer may
// write ConfigMaps, creates the ConfigMap it declares; an admin then
// installs a chart of that ConfigMap with helm install --take-ownership.
// The lock decided it held the ConfigMap before Helm had it, and its next
// write would land after: each write checks again (see the controller's
// tenantWriteGuard), so the admin's value is never written over, not even
// once, and the lock says it does not hold the ConfigMap because Helm
// installed it. The same check covers a ConfigMap an admin's install
// creates between the lock's read of the cluster and its first write,
// which no test can time.
func TestTenantLockNeverWritesOverHelm(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	grantConfigMaps(t, ns, "writer")
	optIn(t, ns, "writer", "*")
	createManifestLock(t, ns, "tenant", map[string]any{"manifest": configMapYAML("settings", "tenant"), "serviceAccountName": "writer"})
	waitKey(t, ns, "settings", "tenant")
	waitManifestLock(t, ns, "tenant", mlv1.StateLocked)

	// Every version of the ConfigMap from here on.
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.Kube.CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=settings", ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*corev1.ConfigMap); ok {
				values = append(values, c.Data["key"])
			}
		}
	}()
	defer func() {
		w.Stop()
		<-watched
	}()

	env.Helm(t, framework.Helm3, "install", "settings", configMapChart(t, "settings", "admin"), "-n", ns, "--take-ownership")
	env.Eventually(t, 30*time.Second, func() error {
		ml := getManifestLock(t, ns, "tenant")
		for _, p := range ml.Status.NotLocked {
			if p.Object == "ConfigMap "+ns+"/settings" && p.Reason == mlv1.ReasonInstalledByHelm && strings.Contains(p.Message, "Helm release "+ns+"/settings") {
				return nil
			}
		}
		return fmt.Errorf("ManifestLock %s/tenant: notLocked %+v, conditions %+v; want ConfigMap %s/settings as %s",
			ns, ml.Status.NotLocked, ml.Status.Conditions, ns, mlv1.ReasonInstalledByHelm)
	})
	env.Consistently(t, 2*time.Second, func() error {
		if got, _ := keyOf(t, ns, "settings"); got != "admin" {
			return fmt.Errorf("ConfigMap %s/settings data.key = %q; want the admin's %q", ns, got, "admin")
		}
		return nil
	})
	w.Stop()
	<-watched
	if i := slices.Index(values, "admin"); i < 0 || slices.ContainsFunc(values[i:], func(v string) bool { return v != "admin" }) {
		t.Errorf("data.key of each version of the ConfigMap since the lock held it: %q; once Helm wrote %q, want no other", values, "admin")
	}
}

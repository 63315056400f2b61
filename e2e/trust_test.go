package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// tenant makes ServiceAccount name in ns, allowed to write Secrets in ns
// and nothing else, and returns a client that acts as it: a tenant who
// can forge release Secrets of the releases in its namespace.
func tenant(t *testing.T, ns, name string) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name + "-secrets"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.CP.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the tenant may list ClusterRoleBindings; the test's premise is a tenant who may only write Secrets")
	}
	return client
}

// forge writes, as client, revision `to` of release in ns: revision from
// with its manifest passed through edit, marked deployed and labelled with
// version label, while revision from is marked superseded. It is encoded
// exactly as Helm's Secret driver writes a release.
func forge(t *testing.T, client kubernetes.Interface, ns, release string, from, to int, label string, edit func(string) string) {
	t.Helper()
	secrets := client.CoreV1().Secrets(ns)
	oldName := fmt.Sprintf("sh.helm.release.v1.%s.v%d", release, from)
	old, err := secrets.Get(t.Context(), oldName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rel := decodeRelease(t, old.Data["release"])
	rel["version"] = to
	rel["manifest"] = edit(rel["manifest"].(string))
	rel["info"].(map[string]any)["status"] = "deployed"
	if _, err := secrets.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("sh.helm.release.v1.%s.v%d", release, to),
			Labels: map[string]string{"owner": "helm", "name": release, "status": "deployed", "version": label},
		},
		Type: "helm.sh/release.v1",
		Data: map[string][]byte{"release": encodeRelease(t, rel)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("forging revision %d: %v", to, err)
	}
	superseded := decodeRelease(t, old.Data["release"])
	superseded["info"].(map[string]any)["status"] = "superseded"
	old.Labels["status"] = "superseded"
	old.Data["release"] = encodeRelease(t, superseded)
	if _, err := secrets.Update(t.Context(), old, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking revision %d superseded: %v", from, err)
	}
}

// appendDocs returns an edit that adds YAML documents to a manifest.
func appendDocs(docs string) func(string) string {
	return func(m string) string { return m + "\n---\n" + docs }
}

// clusterAdminFor is a ClusterRoleBinding named name that makes the tenant
// ServiceAccount of ns cluster-admin: what a forger wants most.
func clusterAdminFor(ns, name string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- kind: ServiceAccount
  name: tenant
  namespace: %s
`, name, ns)
}

// waitNotApplied waits until the CR reports revision held off as
// NotAppliedByHelm, naming every one of objects in status.notLocked and in
// a Warning event.
func waitNotApplied(t *testing.T, registration, cr string, revision int, objects ...string) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmReleaseIn(t, registration, cr)
		c := findCondition(hr, v1alpha1.ConditionLocked)
		if hr.Status.Version != revision || c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NotAppliedByHelm" {
			return fmt.Errorf("status version %d, Locked %+v; want revision %d Locked=False/NotAppliedByHelm", hr.Status.Version, c, revision)
		}
		if hr.Status.State == v1alpha1.StateDeployed {
			return fmt.Errorf("state Deployed while objects are held off")
		}
		for _, o := range objects {
			found := false
			for _, p := range hr.Status.NotLocked {
				found = found || (p.Object == o && p.Reason == "NotAppliedByHelm")
			}
			if !found {
				return fmt.Errorf("status.notLocked %+v does not name %s as NotAppliedByHelm", hr.Status.NotLocked, o)
			}
			warned := false
			for _, ev := range env.Events(t, registration, cr) {
				warned = warned || (ev.Type == corev1.EventTypeWarning && ev.Reason == "NotAppliedByHelm" &&
					strings.Contains(ev.Message, o) && strings.Contains(ev.Message, "revision "+strconv.Itoa(revision)))
			}
			if !warned {
				return fmt.Errorf("no NotAppliedByHelm Warning event names %s and revision %d", o, revision)
			}
		}
		return nil
	})
}

// absent checks for a while that none of the objects exist.
func absent(t *testing.T, objects ...[4]string) {
	t.Helper()
	env.Consistently(t, 2*time.Second, func() error {
		for _, o := range objects {
			if env.Get(t, o[0], o[1], o[2], o[3]) != nil {
				return fmt.Errorf("%s %s/%s exists: the locker wrote what Helm never applied", o[1], o[2], o[3])
			}
		}
		return nil
	})
}

// stillLocked shows the lock still holds what it verified before: an edit
// of the release's ConfigMap, unchanged by the forgery, is reverted.
func stillLocked(t *testing.T, ns, release string) {
	t.Helper()
	setKey(t, ns, release+"-config", "tampered")
	waitForKey(t, ns, release+"-config", "declared")
}

// viewerRules returns the rules of the guarded chart's ClusterRole.
func viewerRules(t *testing.T, ns, release string) string {
	role := env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", ns+"-"+release+"-viewer")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	return fmt.Sprint(rules)
}

const viewerRulesDeclared = "[map[apiGroups:[] resources:[configmaps] verbs:[get list]]]"

// TestForgedRevisionIsHeldOff: a tenant who may only write Secrets in its
// namespace writes a new revision of a locked release, encoded exactly as
// Helm does. Nothing Helm did not apply is created or changed, the CR says
// NotAppliedByHelm, and what was locked before stays locked, as does the
// release next to it.
func TestForgedRevisionIsHeldOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    framework.HelmVersion
		// forge returns the edit of the manifest, the objects the CR
		// must name, and the objects that must not appear.
		forge func(ns string) (func(string) string, []string, [][4]string)
		// after checks more, once the forged revision is held off.
		after func(t *testing.T, ns string)
	}{{
		name: "ClusterRoleBinding and ConfigMap in kube-system", v: framework.Helm3,
		forge: func(ns string) (func(string) string, []string, [][4]string) {
			return appendDocs(clusterAdminFor(ns, ns+"-tenant-admin") + fmt.Sprintf(`---
apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s-planted
  namespace: kube-system
data:
  planted: "yes"
`, ns)), []string{"ClusterRoleBinding " + ns + "-tenant-admin", "ConfigMap kube-system/" + ns + "-planted"},
				[][4]string{{"rbac.authorization.k8s.io/v1", "clusterrolebindings", "", ns + "-tenant-admin"}, {"v1", "configmaps", "kube-system", ns + "-planted"}}
		},
	}, {
		name: "RoleBinding in the tenant's namespace", v: framework.Helm4,
		forge: func(ns string) (func(string) string, []string, [][4]string) {
			return appendDocs(fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: tenant-admin
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: admin
subjects:
- kind: ServiceAccount
  name: tenant
  namespace: %s
`, ns)), []string{"RoleBinding " + ns + "/tenant-admin"}, [][4]string{{"rbac.authorization.k8s.io/v1", "rolebindings", ns, "tenant-admin"}}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			forger := tenant(t, ns, "tenant")
			cr := lockGuarded(t, tc.v, ns)
			neighbour := env.Namespace(t)
			lockConfigMaps(t, framework.Helm3, neighbour, "next", 1)

			edit, named, mustNotExist := tc.forge(ns)
			forge(t, forger, ns, "app", 1, 2, "2", edit)
			waitNotApplied(t, framework.RegistrationNamespace, cr, 2, named...)
			absent(t, mustNotExist...)
			stillLocked(t, ns, "app")
			setKey(t, neighbour, "next-0", "drifted")
			waitForKey(t, neighbour, "next-0", "declared")
		})
	}

	// Widening the rules of a ClusterRole the release has: Helm applied
	// other rules, so the forged ones are never written, and the role is
	// held at the verified rules meanwhile: an admin's later edit of them
	// is reverted to those (denied, in Prevent mode), never to the forged
	// ones, and never left standing.
	for _, v := range framework.HelmVersions {
		for _, mode := range []v1alpha1.Mode{v1alpha1.ModeEnforce, v1alpha1.ModePrevent} {
			t.Run("ClusterRole rules widened/"+v.String()+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				widenedClusterRole(t, v, mode)
			})
		}
	}
}

// widenedClusterRole is a subtest of TestForgedRevisionIsHeldOff.
func widenedClusterRole(t *testing.T, v framework.HelmVersion, mode v1alpha1.Mode) {
	ns := env.Namespace(t)
	forger := tenant(t, ns, "tenant")
	cr := lockGuarded(t, v, ns)
	if mode == v1alpha1.ModePrevent {
		if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), cr, types.MergePatchType, []byte(`{"spec":{"mode":"Prevent"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForRules(t, "clusterroles")
	}
	role := ns + "-app-viewer"
	forge(t, forger, ns, "app", 1, 2, "2", func(m string) string {
		return strings.Replace(m, `- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list"]`, `- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]`, 1)
	})
	waitNotApplied(t, framework.RegistrationNamespace, cr, 2, "ClusterRole "+role)
	env.Consistently(t, 2*time.Second, func() error {
		if got := viewerRules(t, ns, "app"); got != viewerRulesDeclared {
			return fmt.Errorf("ClusterRole %s rules = %s: the forged rules were written", role, got)
		}
		return nil
	})
	editVerbs := []string{"patch", "clusterrole", role, "--type", "json", "-p", `[{"op":"replace","path":"/rules/0/verbs","value":["get"]}]`}
	if mode == v1alpha1.ModePrevent {
		denied(t, []string{"ClusterRole " + role + " is locked by HelmRelease", `must stay ["get","list"]`}, editVerbs...)
	} else {
		env.Kubectl(t, editVerbs...)
	}
	env.Eventually(t, 10*time.Second, func() error {
		if got := viewerRules(t, ns, "app"); got != viewerRulesDeclared {
			return fmt.Errorf("ClusterRole %s rules = %s after an admin's edit; want the verified rules %s back", role, got, viewerRulesDeclared)
		}
		return nil
	})
	if mode != v1alpha1.ModePrevent {
		// (In Prevent mode the denial above shows it.)
		stillLocked(t, ns, "app")
	}
}

// TestRevisionForgedWhileLockerIsDown: the status records the verified
// revision, so a locker that starts after the forgery still holds it off,
// while objects of the verified revision deleted meanwhile are recreated.
func TestRevisionForgedWhileLockerIsDown(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	forger := tenant(t, ns, "tenant")
	flags := []string{"--namespace", registration, "--controller-name", "down-locker", "--leader-elect=false"}
	locker, err := env.StartLocker("down-locker", flags...)
	if err != nil {
		t.Fatal(err)
	}
	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "guarded"), "-n", ns)
	cr := env.RegisterIn(t, registration, ns, "app")
	hr := env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	if v := hr.Status.Verified; v == nil || v.Revision != 1 || v.ManifestDigest == "" {
		t.Fatalf("status.verified = %+v, want revision 1 with a digest", v)
	}
	if err := locker.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	forge(t, forger, ns, "app", 1, 99999, "99999", appendDocs(clusterAdminFor(ns, ns+"-while-down")))
	env.Kubectl(t, "delete", "configmap", "-n", ns, "app-config")

	locker, err = env.StartLocker("down-locker-again", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	waitNotApplied(t, registration, cr, 99999, "ClusterRoleBinding "+ns+"-while-down")
	absent(t, [4]string{"rbac.authorization.k8s.io/v1", "clusterrolebindings", "", ns + "-while-down"})
	// The ConfigMap is unchanged from the verified revision: recreated.
	waitForKey(t, ns, "app-config", "declared")
}

// lockGuarded installs the guarded chart as release "app" in ns and waits
// until the shared locker holds it.
func lockGuarded(t *testing.T, v framework.HelmVersion, ns string, set ...string) string {
	t.Helper()
	args := []string{"install", "app", framework.Chart(t, "guarded"), "-n", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	env.Helm(t, v, args...)
	cr := env.Register(t, ns, "app")
	hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("state Deployed without Locked=True: %+v", hr.Status.Conditions)
	}
	return cr
}

// TestUpgradeAddingObjectsOutsideTheNamespaceIsLocked: an upgrade that adds
// a ClusterRole, a CRD and an object in another namespace is verified, as
// Helm applied it, and every object of it is held.
func TestUpgradeAddingObjectsOutsideTheNamespaceIsLocked(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			other := env.Namespace(t)
			cr := lockGuarded(t, v, ns)
			env.Helm(t, v, "upgrade", "app", framework.Chart(t, "guarded"), "-n", ns, "--set", "extras=true,otherNamespace="+other)
			hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("Locked after the upgrade = %+v", c)
			}
			env.Eventually(t, 10*time.Second, func() error {
				if v := env.HelmRelease(t, cr).Status.Verified; v == nil || v.Revision != 2 {
					return fmt.Errorf("status.verified = %+v, want revision 2", v)
				}
				return nil
			})

			extra := ns + "-app-extra"
			crd := "gadgets." + ns + ".example.com"
			env.Kubectl(t, "delete", "clusterrole", extra)
			env.Kubectl(t, "patch", "crd", crd, "--type", "merge", "-p", `{"spec":{"names":{"singular":"gizmo"}}}`)
			setKey(t, other, "app-elsewhere", "tampered")
			env.Eventually(t, 30*time.Second, func() error {
				if env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", extra) == nil {
					return fmt.Errorf("ClusterRole %s not recreated", extra)
				}
				obj := env.Get(t, "apiextensions.k8s.io/v1", "customresourcedefinitions", "", crd)
				if singular, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "singular"); singular != "gadget" {
					return fmt.Errorf("CRD %s singular = %q, want gadget", crd, singular)
				}
				if got, _ := keyOf(t, other, "app-elsewhere"); got != "declared" {
					return fmt.Errorf("ConfigMap %s/app-elsewhere data.key = %q", other, got)
				}
				return nil
			})
		})
	}
}

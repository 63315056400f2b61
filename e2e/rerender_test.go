package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// twoWay installs the two-way chart as release "app" in a new namespace
// with the helm CLI v and args, with a ServiceAccount "writer" bound to
// edit there, and registers it with spec.rerender rerender, writing as
// writer. It returns the namespace and the CR, once the lock holds
// revision 1 and its first render is reported.
func twoWay(t *testing.T, v framework.HelmVersion, rerender v1alpha1.Rerender, prepare func(ns string), args ...string) (ns, cr string) {
	t.Helper()
	ns = env.Namespace(t)
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
	if prepare != nil {
		prepare(ns)
	}
	env.Helm(t, v, append([]string{"install", "app", framework.Chart(t, "two-way"), "-n", ns}, args...)...)
	cr = env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": string(rerender)})
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	return ns, cr
}

// waitRendered waits until the CR's Rendered condition has status and
// reason, and its message has every one of contains.
func waitRendered(t *testing.T, cr string, timeout time.Duration, status metav1.ConditionStatus, reason string, contains ...string) *v1alpha1.HelmRelease {
	t.Helper()
	var hr *v1alpha1.HelmRelease
	env.Eventually(t, timeout, func() error {
		hr = env.HelmRelease(t, cr)
		c := findCondition(hr, v1alpha1.ConditionRendered)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("HelmRelease %s Rendered = %+v, want %s/%s", cr, c, status, reason)
		}
		for _, s := range contains {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("HelmRelease %s Rendered message %q lacks %q", cr, c.Message, s)
			}
		}
		return nil
	})
	return hr
}

// setGreeting writes data.greeting of ConfigMap ns/settings, creating it.
func setGreeting(t *testing.T, ns, greeting string) {
	t.Helper()
	patch := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"greeting":%q}}`, greeting)
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), "settings", types.ApplyPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e-settings", Force: new(true)}); err != nil {
		t.Fatal(err)
	}
}

// changedPaths are the paths status.rerender says object would change at.
func changedPaths(hr *v1alpha1.HelmRelease, object string) []string {
	if hr.Status.Rerender == nil {
		return nil
	}
	for _, c := range hr.Status.Rerender.Changes {
		if c.Object == object {
			return c.Paths
		}
	}
	return nil
}

// TestRerenderLookup: a chart copies a value from a lookup of another
// ConfigMap. Editing that ConfigMap makes Report mode say the chart is
// stale, naming the lookup and the path; Upgrade mode writes revision 2
// with the new value, and the CLI's own upgrade
// after it needs no --force.
func TestRerenderLookup(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String()+"/Report", func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, v, v1alpha1.RerenderReport, func(ns string) { setGreeting(t, ns, "hello") })
			hr := waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			if got, want := hr.Status.Rerender.Lookups, "ConfigMap "+ns+"/settings"; !slices.Contains(got, want) {
				t.Errorf("status.rerender.lookups = %v, want it to name %s", got, want)
			}

			setGreeting(t, ns, "bonjour")
			// How fast is the benchmarks' to say; here, within a bound
			// that holds on a busy machine.
			hr = waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, "lookup of ConfigMap "+ns+"/settings changed")
			object := "ConfigMap " + ns + "/app-two-way"
			if paths := changedPaths(hr, object); !slices.Contains(paths, "/data/greeting") {
				t.Errorf("status.rerender.changes of %s = %v, want /data/greeting among them: %+v", object, paths, hr.Status.Rerender)
			}
			if got, _ := keyValue(t, ns, "app-two-way", "greeting"); got != "hello" {
				t.Errorf("Report mode changed the object: greeting = %q", got)
			}
			env.Eventually(t, 30*time.Second, func() error {
				for _, e := range env.Events(t, framework.RegistrationNamespace, cr) {
					if e.Reason == "RenderChanged" && strings.Contains(e.Message, "settings") {
						return nil
					}
				}
				return fmt.Errorf("no RenderChanged event on %s", cr)
			})

			// Back as it was, the chart renders as stored again.
			setGreeting(t, ns, "hello")
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
		})
		t.Run(v.String()+"/Upgrade", func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, v, v1alpha1.RerenderUpgrade, func(ns string) { setGreeting(t, ns, "hello") })
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)

			setGreeting(t, ns, "bonjour")
			waitGreeting(t, ns, "bonjour", 60*time.Second)
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			history := env.Helm(t, v, "history", "app", "-n", ns, "-o", "json")
			if !strings.Contains(history, `"revision":2`) || !strings.Contains(history, `"status":"deployed"`) || !strings.Contains(history, `"status":"superseded"`) {
				t.Errorf("helm history after the locker's upgrade:\n%s", history)
			}
			if got, _ := keyValue(t, ns, "app-two-way", "app.ini"); !strings.Contains(got, "revision = 2") || strings.Contains(got, "first_run") {
				t.Errorf("revision 2 was not rendered as an upgrade (.Release.Revision 2, not IsInstall): %s", got)
			}

			// The CLI's next upgrade takes over without --force.
			env.Helm(t, v, "upgrade", "app", framework.Chart(t, "two-way"), "-n", ns, "--reuse-values", "--set", "settings.defaultGreeting=hi")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 3)
			setGreeting(t, ns, "hallo")
			waitGreeting(t, ns, "hallo", 60*time.Second)
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 4)
		})
	}
}

// waitGreeting waits until the two-way chart's ConfigMap of release "app"
// in ns greets with want.
func waitGreeting(t *testing.T, ns, want string, timeout time.Duration) {
	t.Helper()
	env.Eventually(t, timeout, func() error {
		if got, _ := keyValue(t, ns, "app-two-way", "greeting"); got != want {
			return fmt.Errorf("ConfigMap %s/app-two-way greeting = %q, want %q", ns, got, want)
		}
		return nil
	})
}

// keyValue is data[key] of ConfigMap ns/name.
func keyValue(t *testing.T, ns, name, key string) (string, bool) {
	t.Helper()
	cm := env.Get(t, "v1", "configmaps", ns, name)
	if cm == nil {
		return "", false
	}
	v, ok, _ := unstructured.NestedString(cm.Object, "data", key)
	return v, ok
}

// TestRerenderCapabilities: a chart renders an object only while the
// cluster serves a custom group-version; creating its CRD flips Rendered,
// naming the API.
func TestRerenderCapabilities(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			group := strings.ToLower(randomHex(t)) + ".two-way.example.com"
			_, cr := twoWay(t, v, v1alpha1.RerenderReport, nil, "--set", "monitoring.group="+group)
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			env.Helm(t, v, "install", "crd-"+group[:8], framework.Chart(t, "crds"), "-n", env.Namespace(t), "--set", "group="+group)
			hr := waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, group+"/v1 is now served")
			if rr := hr.Status.Rerender; rr == nil || len(rr.Changes) == 0 || !rr.Changes[0].Added {
				t.Errorf("status.rerender = %+v, want the monitoring ConfigMap added", rr)
			}
		})
	}
}

// TestRerenderKubeVersion: a chart labels its objects with the cluster's
// minor version; once the API server answers with another version, and
// the watches reconnect, the chart is reported stale, naming both, for a
// release installed by each helm CLI.
func TestRerenderKubeVersion(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	proxy := env.StartProxy(t)
	locker, err := env.StartLockerWith("rerender-kube-version", proxy.Kubeconfig(), "--namespace", registration)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })
	// A release installed by each CLI, locked by the one locker.
	crs := map[framework.HelmVersion]string{}
	for _, v := range framework.HelmVersions {
		ns := env.Namespace(t)
		env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
		env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
		env.Helm(t, v, "install", "app", framework.Chart(t, "two-way"), "-n", ns, "--set", "kubeVersionLabel=true")
		crs[v] = env.RegisterWith(t, registration, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": "Report"})
	}
	rendered := func(status metav1.ConditionStatus, reason string, contains ...string) {
		t.Helper()
		for v, cr := range crs {
			env.Eventually(t, 30*time.Second, func() error {
				c := findCondition(env.HelmReleaseIn(t, registration, cr), v1alpha1.ConditionRendered)
				if c == nil || c.Status != status || c.Reason != reason {
					return fmt.Errorf("%s: Rendered = %+v, want %s/%s", v, c, status, reason)
				}
				for _, s := range contains {
					if !strings.Contains(c.Message, s) {
						return fmt.Errorf("%s: Rendered message %q lacks %q", v, c.Message, s)
					}
				}
				return nil
			})
		}
	}
	rendered(metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
	was, err := env.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	proxy.AnswerVersion("v1.99.0")
	proxy.BlockWatches(true)
	time.Sleep(time.Second)
	proxy.BlockWatches(false)
	rendered(metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, fmt.Sprintf("Kubernetes v1.99.0 (was %s)", was.GitVersion))
}

// TestRerenderGeneratedValues: a chart that generates a password and a CA
// at install (randAlphaNum, genCA, uuidv4) is never reported stale while
// unrelated ConfigMaps change around it.
func TestRerenderGeneratedValues(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, v, v1alpha1.RerenderReport, nil, "--set", "credentials.enabled=true")
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(500 * time.Millisecond):
					}
					// The settings it looks up, unchanged, and others.
					setGreeting(t, ns, "hello")
					patch := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"unrelated-%d"},"data":{"n":"%d"}}`, i%5, i)
					_, _ = env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), fmt.Sprintf("unrelated-%d", i%5), types.ApplyPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e", Force: new(true)})
				}
			}()
			env.Consistently(t, 60*time.Second, func() error {
				c := findCondition(env.HelmRelease(t, cr), v1alpha1.ConditionRendered)
				if c == nil || c.Status != metav1.ConditionTrue {
					return fmt.Errorf("Rendered = %+v: generated values reported as staleness", c)
				}
				return nil
			})
			close(stop)
			<-done
		})
	}
}

// TestRerenderTrust: a lookup the write identity may not make says
// Forbidden, naming it, and reads nothing (a release of each helm CLI); a lock that writes as the
// locker itself renders nothing; a revision the lock never verified is
// never rendered.
func TestRerenderTrust(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run("Forbidden/"+v.String(), func(t *testing.T) {
			t.Parallel()
			elsewhere := env.Namespace(t)
			env.Kubectl(t, "-n", elsewhere, "create", "secret", "generic", "settings", "--from-literal=greeting=top-secret")
			_, cr := twoWay(t, v, v1alpha1.RerenderReport, nil, "--set", "settings.kind=Secret,settings.namespace="+elsewhere)
			hr := waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonRenderForbidden, "lookup of Secret "+elsewhere+"/settings")
			if strings.Contains(fmt.Sprint(hr.Status), "top-secret") {
				t.Errorf("the status shows the Secret's value: %+v", hr.Status)
			}
		})
	}
	t.Run("NoWriteIdentity", func(t *testing.T) {
		t.Parallel()
		ns := env.Namespace(t)
		env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "two-way"), "-n", ns)
		cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"rerender": "Report"})
		waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonNoWriteIdentity, "serviceAccountName")
	})
	// Revision 2, written by a Secret writer, with a chart whose values
	// look up another ConfigMap: one declares an object more, which
	// Helm never applied, so it is never verified; the other changes no
	// object, so it is verified, but Helm was never seen to apply its
	// chart.
	for name, extra := range map[string]string{
		"ForgedRevision": "\n---\n# Source: two-way/templates/forged.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forged\ndata:\n  k: v\n",
		"ForgedChart":    "",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, framework.Helm3, v1alpha1.RerenderReport, func(ns string) { setGreeting(t, ns, "hello") })
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			secrets := env.Kube.CoreV1().Secrets(ns)
			src, err := secrets.Get(t.Context(), "sh.helm.release.v1.app.v1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rel := decodeRelease(t, src.Data["release"])
			rel["version"] = 2
			rel["manifest"] = rel["manifest"].(string) + extra
			rel["config"] = map[string]any{"settings": map[string]any{"name": "forged-lookup"}}
			src.ObjectMeta = metav1.ObjectMeta{Name: "sh.helm.release.v1.app.v2", Labels: map[string]string{"owner": "helm", "name": "app", "status": "deployed", "version": "2"}}
			src.Data = map[string][]byte{"release": encodeRelease(t, rel)}
			if _, err := secrets.Create(t.Context(), src, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if extra == "" {
				env.Eventually(t, 30*time.Second, func() error {
					if v := env.HelmRelease(t, cr).Status.Verified; v == nil || v.Revision != 2 {
						return fmt.Errorf("status.verified = %+v, want revision 2, whose objects are all revision 1's", v)
					}
					return nil
				})
			}
			setGreeting(t, ns, "bonjour")
			hr := waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, "settings")
			if rr := hr.Status.Rerender; rr.Revision != 1 || slices.ContainsFunc(rr.Lookups, func(l string) bool { return strings.Contains(l, "forged-lookup") }) {
				t.Errorf("status.rerender = %+v: the forged chart of revision 2 was rendered", rr)
			}
		})
	}
}

// TestRerenderCorpus: Report mode reports nothing when nothing changed, on
// every chart of the suite written as real charts are, installed by each
// helm CLI and rendered again for as long as a few of the locker's
// renders take. The write identity may write anything in the release
// namespace, custom resources included, so that every lock settles.
func TestRerenderCorpus(t *testing.T) {
	t.Parallel()
	charts := []struct {
		chart string
		args  func(ns string) []string
	}{
		{"webstack", nil},
		{"configmaps", func(string) []string { return []string{"--set", "count=3,unlocked={1}"} }},
		{"crds", func(ns string) []string { return []string{"--set", "group=" + ns + ".example.com"} }},
		{"two-way", func(ns string) []string {
			return []string{"--set", "credentials.enabled=true,kubeVersionLabel=true,monitoring.group=apps"}
		}},
	}
	for _, v := range framework.HelmVersions {
		for _, c := range charts {
			t.Run(v.String()+"/"+c.chart, func(t *testing.T) {
				t.Parallel()
				ns := env.Namespace(t)
				namespaceAdmin(t, ns, "writer")
				// Cluster-scoped objects are named after the release.
				release := "corpus-" + randomHex(t)
				args := []string{"install", release, framework.Chart(t, c.chart), "-n", ns}
				if c.args != nil {
					args = append(args, c.args(ns)...)
				}
				env.Helm(t, v, args...)
				cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{"serviceAccountName": "writer", "rerender": "Report"})
				env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
				waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
				env.Consistently(t, 5*time.Second, func() error {
					hr := env.HelmRelease(t, cr)
					if c := findCondition(hr, v1alpha1.ConditionRendered); c == nil || c.Status != metav1.ConditionTrue {
						return fmt.Errorf("Rendered = %+v, status.rerender = %+v", c, hr.Status.Rerender)
					}
					return nil
				})
				for _, e := range env.Events(t, framework.RegistrationNamespace, cr) {
					if e.Reason == "RenderChanged" {
						t.Errorf("event %s: %s", e.Reason, e.Message)
					}
				}
			})
		}
	}
}

// namespaceAdmin creates ServiceAccount name in ns, which may do anything
// in ns.
func namespaceAdmin(t *testing.T, ns, name string) {
	t.Helper()
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", name)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "-n", ns, "create", "rolebinding", name, "--role="+name, "--serviceaccount="+ns+":"+name)
}

// TestRerenderUpgradeFailed: in Upgrade mode, an upgrade Helm fails (the
// write identity may not write the ConfigMap that must change) is reported
// with Helm's error, is not tried again, and leaves the release locked:
// Helm 3 rolls it back to a deployed revision 3, and with Helm 4, whose
// rollback fails too, the lock holds revision 1 past the failed one. An
// edit is still reverted.
func TestRerenderUpgradeFailed(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			setGreeting(t, ns, "hello")
			noConfigMapWrites(t, ns, "writer")
			env.Helm(t, v, "install", "app", framework.Chart(t, "two-way"), "-n", ns)
			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": "Upgrade"})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)

			setGreeting(t, ns, "bonjour")
			waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonUpgradeFailed, "lookup of ConfigMap "+ns+"/settings changed", "is forbidden")
			held := 3 // Helm 3's rollback, deployed
			if v == framework.Helm4 {
				held = 1 // the last verified, past the failed rollback
			}
			env.WaitForState(t, cr, v1alpha1.StateDeployed, held)
			secrets := func() int {
				list, err := env.Kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm,name=app"})
				if err != nil {
					t.Fatal(err)
				}
				return len(list.Items)
			}
			revisions := secrets()
			env.Consistently(t, 10*time.Second, func() error {
				hr := env.HelmRelease(t, cr)
				if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
					return fmt.Errorf("Locked = %+v after the failed upgrade, want True", c)
				}
				if n := secrets(); n != revisions {
					return fmt.Errorf("%d revisions, then %d: the failed upgrade was tried again", revisions, n)
				}
				return nil
			})
			if got, _ := keyValue(t, ns, "app-two-way", "greeting"); got != "hello" {
				t.Errorf("greeting = %q after the failed upgrade, want hello", got)
			}
			env.Kubectl(t, "-n", ns, "scale", "deployment", "app-two-way", "--replicas=4")
			env.Eventually(t, 30*time.Second, func() error {
				d := env.Get(t, "apps/v1", "deployments", ns, "app-two-way")
				if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 1 {
					return fmt.Errorf("replicas = %d, want 1 back", n)
				}
				return nil
			})
		})
	}
}

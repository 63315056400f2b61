package outage

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// resumeBound is how soon after the API server is ready again reverts must
// resume, whatever the outage's length.
const resumeBound = 2 * time.Second

// locker is one test's helm-locker process, with the default flags
// (leader election on) and its own registration namespace.
type locker struct {
	proc         *framework.Locker
	registration string
	// health is the address of its /healthz and /readyz.
	health string
}

func startLocker(t *testing.T, name, kubeconfig string) *locker {
	t.Helper()
	l := &locker{registration: env.Namespace(t)}
	var err error
	l.proc, err = env.StartLockerWith(name, kubeconfig, "--namespace", l.registration, "--controller-name", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.proc.Stop(20 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Log(framework.LogTail(l.proc, 60))
		}
	})
	l.health = framework.ServedAddress(t, l.proc, "health probes")
	// It installs the HelmRelease CRD as it starts.
	env.Eventually(t, time.Minute, func() error {
		_, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(l.registration).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err
	})
	return l
}

// lock installs the configmaps chart as release with helm v, registers it
// with l, and waits until it is Locked.
func (l *locker) lock(t *testing.T, v framework.HelmVersion, ns, release string) string {
	t.Helper()
	env.Helm(t, v, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterIn(t, l.registration, ns, release)
	l.waitLocked(t, cr, 1)
	return cr
}

// waitLocked waits until the CR says Deployed at revision with Locked=True.
func (l *locker) waitLocked(t *testing.T, cr string, revision int) {
	t.Helper()
	env.Eventually(t, time.Minute, func() error {
		hr := env.HelmReleaseIn(t, l.registration, cr)
		c := condition(hr, v1alpha1.ConditionLocked)
		if hr.Status.State != v1alpha1.StateDeployed || hr.Status.Version != revision || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("HelmRelease %s: state %q revision %d, Locked %+v; want Deployed at %d, Locked=True", cr, hr.Status.State, hr.Status.Version, c, revision)
		}
		return nil
	})
}

// readyz returns the locker's /readyz status code and body.
func (l *locker) readyz() (int, string) { return framework.HTTPGet("http://" + l.health + "/readyz") }

// TestAPIServerOutages stops kube-apiserver (SIGKILL) for 10 s, 40 s and
// 120 s under a locker with the default flags, and starts it again. Each
// time, edits made as soon as it is ready are reverted within resumeBound,
// both helm CLIs then upgrade their releases without error, and the new
// revisions are locked. The 40 s and 120 s outages outlast the leader's
// renew deadline: the locker stops leading, and must lead again on its
// own.
func TestAPIServerOutages(t *testing.T) {
	l := startLocker(t, "outage-locker", env.CP.Kubeconfig)
	type release struct {
		v      framework.HelmVersion
		ns, cr string
		value  string // what data.key is declared as
		rev    int
	}
	var releases []*release
	for _, v := range framework.HelmVersions {
		r := &release{v: v, ns: env.Namespace(t), value: "declared", rev: 1}
		r.cr = l.lock(t, v, r.ns, "cms")
		releases = append(releases, r)
	}

	for _, outage := range []time.Duration{10 * time.Second, 40 * time.Second, 120 * time.Second} {
		t.Run(outage.String(), func(t *testing.T) {
			if err := env.CP.StopAPIServer(true); err != nil {
				t.Fatal(err)
			}
			time.Sleep(outage)
			readyAt, err := env.CP.StartAPIServer(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range releases {
				setKey(t, r.ns, "cms-0", "edited after the outage")
			}
			var lastRevert time.Duration
			for _, r := range releases {
				env.Eventually(t, 30*time.Second, func() error { return hasKey(t, r.ns, "cms-0", r.value) })
				lastRevert = time.Since(readyAt)
			}
			t.Logf("%s outage: edits reverted %s after kube-apiserver was ready", outage, lastRevert.Round(time.Millisecond))
			if lastRevert > resumeBound {
				t.Errorf("after a %s outage, edits were reverted %s after kube-apiserver was ready; want within %s", outage, lastRevert.Round(time.Millisecond), resumeBound)
			}

			for _, r := range releases {
				r.value, r.rev = "after "+outage.String(), r.rev+1
				env.Helm(t, r.v, "upgrade", "cms", framework.Chart(t, "configmaps"), "-n", r.ns, "--set", "count=2,value="+r.value)
				l.waitLocked(t, r.cr, r.rev)
				setKey(t, r.ns, "cms-1", "edited after the upgrade")
				env.Eventually(t, 10*time.Second, func() error { return hasKey(t, r.ns, "cms-1", r.value) })
			}
		})
	}
}

// TestWatchesCutUntilCompacted cuts a locker's watches, refusing new ones,
// while every other request still reaches the API server. The CRs then say
// Locked=Unknown (WatchesNotSynced) and /readyz fails. Edits made meanwhile
// are not seen; once etcd has compacted past the locker's resourceVersion,
// watches are let through again, the resumed watch gets 410 Gone, and the
// edits are reverted.
func TestWatchesCutUntilCompacted(t *testing.T) {
	proxy := env.StartProxy(t)
	l := startLocker(t, "cut-locker", proxy.Kubeconfig())
	ns := env.Namespace(t)
	cr := l.lock(t, framework.Helm3, ns, "cms")
	if code, body := l.readyz(); code != http.StatusOK {
		t.Fatalf("/readyz of a locked locker = %d %q, want 200", code, body)
	}

	// A watch cut within a second of its start is listed afresh rather
	// than resumed; this one must resume.
	time.Sleep(2 * time.Second)
	proxy.BlockWatches(true)
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmReleaseIn(t, l.registration, cr)
		c := condition(hr, v1alpha1.ConditionLocked)
		if c == nil || c.Status != metav1.ConditionUnknown || c.Reason != "WatchesNotSynced" || !strings.Contains(c.Message, "configmaps") {
			return fmt.Errorf("Locked = %+v while the watches are cut; want Unknown, WatchesNotSynced, naming configmaps", c)
		}
		return nil
	})
	env.Eventually(t, 10*time.Second, func() error {
		if code, body := l.readyz(); code == http.StatusOK || !strings.Contains(body, "watches not current") {
			return fmt.Errorf("/readyz = %d %q while the watches are cut; want a failure naming them", code, body)
		}
		return nil
	})

	setKey(t, ns, "cms-0", "edited while blind")
	setKey(t, ns, "cms-1", "edited while blind")
	// Move etcd's revision on, and give the API server's compaction (every
	// 2 s) time to pass the locker's resourceVersion.
	other := env.Namespace(t)
	for i := range 3 {
		createConfigMap(t, other, fmt.Sprintf("filler-%d", i))
	}
	time.Sleep(6 * time.Second)
	if err := hasKey(t, ns, "cms-0", "edited while blind"); err != nil {
		t.Fatalf("the locker saw an edit through cut watches: %v", err)
	}

	proxy.BlockWatches(false)
	for _, name := range []string{"cms-0", "cms-1"} {
		env.Eventually(t, 30*time.Second, func() error { return hasKey(t, ns, name, "declared") })
	}
	l.waitLocked(t, cr, 1)
	env.Eventually(t, 10*time.Second, func() error {
		if code, body := l.readyz(); code != http.StatusOK {
			return fmt.Errorf("/readyz = %d %q after the watches are back; want 200", code, body)
		}
		return nil
	})
	log, err := os.ReadFile(l.proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "resourceVersion for the provided watch is too old") {
		t.Errorf("no watch of the locker was resumed from a compacted resourceVersion (410 Gone): the case is not what it says")
	}
}

func condition(hr *v1alpha1.HelmRelease, typ string) *metav1.Condition {
	for i := range hr.Status.Conditions {
		if hr.Status.Conditions[i].Type == typ {
			return &hr.Status.Conditions[i]
		}
	}
	return nil
}

// setKey overwrites data.key of a ConfigMap, as `kubectl edit` would.
func setKey(t *testing.T, ns, name, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"data":{"key":%q}}`, value)
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatalf("editing ConfigMap %s/%s: %v", ns, name, err)
	}
}

func hasKey(t *testing.T, ns, name, want string) error {
	obj := env.Get(t, "v1", "configmaps", ns, name)
	if obj == nil {
		return fmt.Errorf("ConfigMap %s/%s does not exist", ns, name)
	}
	if got, _, _ := unstructured.NestedString(obj.Object, "data", "key"); got != want {
		return fmt.Errorf("ConfigMap %s/%s data.key = %q, want %q", ns, name, got, want)
	}
	return nil
}

func createConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/engine"
)

// configMapVersion is one version of a ConfigMap a watch delivered.
type configMapVersion struct {
	event    watch.EventType
	version  string
	key      string
	managers []string
}

func (v configMapVersion) String() string {
	return fmt.Sprintf("%s %s data.key=%q managers=%v", v.event, v.version, v.key, v.managers)
}

// watchConfigMap records every version of ns/name written after the one
// it has now, until the test ends or stop is called.
func watchConfigMap(t *testing.T, ns, name string) (versions func() []configMapVersion, stop func()) {
	t.Helper()
	live, err := env.Dynamic.Resource(configMaps).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.Dynamic.Resource(configMaps).Namespace(ns).Watch(t.Context(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: live.GetResourceVersion(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []configMapVersion
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if stopping.Load() {
				// Stopping the watch may end it with an error.
				continue
			}
			v := configMapVersion{event: ev.Type}
			if obj, ok := ev.Object.(*unstructured.Unstructured); ok {
				v.version = obj.GetResourceVersion()
				v.key, _, _ = unstructured.NestedString(obj.Object, "data", "key")
				v.managers = managers(obj)
			}
			mu.Lock()
			seen = append(seen, v)
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			select {
			case <-done:
				t.Errorf("the watch of ConfigMap %s/%s ended before the test stopped it: later writes were not seen", ns, name)
			default:
			}
			stopping.Store(true)
			w.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return func() []configMapVersion {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}, stop
}

// TestOpenLockKeepsItsObjects: a HelmRelease holds a ConfigMap, and a
// ManifestLock created after it declares the same ConfigMap with another
// value, so it waits in Conflict. While `helm upgrade` changes the
// ConfigMap, the HelmRelease's lock is open but still holds it: the
// ManifestLock does not take it over and writes nothing, and the upgrade
// succeeds without --force or --force-conflicts, with Helm 4's server-side
// apply as with Helm 3's client-side one. Afterwards the HelmRelease holds
// the new value. Before, the open lock let go of the ConfigMap, the
// ManifestLock wrote its own value within milliseconds, and Helm 4's
// upgrade failed with `conflict with "helm-locker" using v1: .data.key`.
func TestOpenLockKeepsItsObjects(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			ns := env.Namespace(t)
			const release = "rel"
			cmName := release + "-0"
			chart := framework.Chart(t, "configmaps")
			env.Helm(t, v, "install", release, chart, "-n", ns, "--set", "value=from-helm")
			cr := env.Register(t, ns, release)
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)

			mlName := "open-" + ns
			createManifestLock(t, framework.RegistrationNamespace, mlName, map[string]any{
				"manifest": configMapYAML(cmName, "from-manifestlock"), "namespace": ns,
			})
			t.Cleanup(func() {
				_ = env.Dynamic.Resource(mlv1.Resource).Namespace(framework.RegistrationNamespace).Delete(t.Context(), mlName, metav1.DeleteOptions{})
			})
			inConflict := conflictWith(t, framework.RegistrationNamespace, mlName, "ConfigMap "+ns+"/"+cmName, cr)
			env.Eventually(t, 30*time.Second, inConflict)

			versions, stop := watchConfigMap(t, ns, cmName)
			// lockerWrites fails the test if a version of the ConfigMap
			// since the upgrade began was written by the locker's field
			// manager, for the ManifestLock (data.key from-manifestlock)
			// or for the HelmRelease: Helm alone writes it.
			lockerWrites := func() {
				t.Helper()
				var locker []configMapVersion
				for _, cv := range versions() {
					if cv.event != watch.Modified || cv.key == "from-manifestlock" || slices.Contains(cv.managers, engine.DefaultFieldManager) {
						locker = append(locker, cv)
					}
				}
				if len(locker) > 0 {
					t.Fatalf("ConfigMap %s/%s during and after the upgrade: %d versions written by the locker (data.key from-manifestlock, or a %q managedFields entry); want none. Every version since the upgrade began:\n%v",
						ns, cmName, len(locker), engine.DefaultFieldManager, versions())
				}
			}
			env.Helm(t, v, "upgrade", release, chart, "-n", ns, "--set", "value=upgraded")
			env.Eventually(t, 30*time.Second, func() error {
				lockerWrites()
				hr := env.HelmRelease(t, cr)
				got, _ := keyOf(t, ns, cmName)
				if hr.Status.State != v1alpha1.StateDeployed || hr.Status.Version != 2 || got != "upgraded" {
					return fmt.Errorf("HelmRelease %s: state %q at revision %d, conditions %+v; ConfigMap data.key %q; want Deployed at 2, and upgraded",
						cr, hr.Status.State, hr.Status.Version, hr.Status.Conditions, got)
				}
				return nil
			})
			env.Consistently(t, 2*time.Second, func() error {
				lockerWrites()
				if got, _ := keyOf(t, ns, cmName); got != "upgraded" {
					return fmt.Errorf("ConfigMap %s/%s data.key = %q after the upgrade; want upgraded", ns, cmName, got)
				}
				return inConflict()
			})
			stop()
			lockerWrites()
			if got := versions(); len(got) != 1 || got[0].key != "upgraded" {
				t.Errorf("ConfigMap %s/%s during and after the upgrade: versions %v; want one, Helm's, with data.key upgraded", ns, cmName, got)
			}

			// The HelmRelease holds the new value; the ManifestLock still
			// waits.
			setKey(t, ns, cmName, "drifted")
			waitForKey(t, ns, cmName, "upgraded")
			if err := inConflict(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLockerStartedWhileHelmWorksKeepsTheObjects: a locker that starts
// while Helm upgrades a release has declared nothing for it. It declares
// the revision the HelmRelease's status says was verified, paused, so a
// ManifestLock that declares one of its objects stays in Conflict and
// writes nothing, as before the restart; once the upgrade is deployed the
// HelmRelease holds the object again. Before, the ManifestLock took the
// object over at startup and wrote its own value over Helm's upgrade.
func TestLockerStartedWhileHelmWorksKeepsTheObjects(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	const release = "rel"
	cmName := release + "-0"
	flags := []string{"--namespace", registration, "--controller-name", "restart-locker", "--leader-elect=false"}
	locker, err := env.StartLocker("restart-locker", flags...)
	if err != nil {
		t.Fatal(err)
	}
	env.Helm(t, framework.Helm3, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "value=from-helm")
	cr := env.RegisterIn(t, registration, ns, release)
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	env.Eventually(t, 30*time.Second, func() error {
		if hr := env.HelmReleaseIn(t, registration, cr); hr.Status.Verified == nil || hr.Status.Verified.Revision != 1 {
			return fmt.Errorf("HelmRelease %s: status.verified %+v; want revision 1", cr, hr.Status.Verified)
		}
		return nil
	})
	// Annotated for this locker: the shared one serves ManifestLocks in
	// every namespace.
	mlName := "restart"
	ml := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": mlName, "namespace": registration,
			"annotations": map[string]any{mlv1.ManagedByAnnotation: "restart-locker"}},
		"spec": map[string]any{"namespace": ns, "manifest": configMapYAML(cmName, "from-manifestlock")},
	}}
	if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(registration).Create(t.Context(), ml, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inConflict := conflictWith(t, registration, mlName, "ConfigMap "+ns+"/"+cmName, cr)
	env.Eventually(t, 30*time.Second, inConflict)
	if err := locker.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Helm starts an upgrade while the locker is down.
	versions, stop := watchConfigMap(t, ns, cmName)
	writeRevision(t, ns, release, 1, 2, "pending-upgrade")
	locker, err = env.StartLocker("restart-locker-again", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateTransitioning, 2)
	noWrites := func() error {
		if got := versions(); len(got) > 0 {
			return fmt.Errorf("ConfigMap %s/%s was written while Helm upgrades the release: %v; want no write", ns, cmName, got)
		}
		return nil
	}
	env.Consistently(t, 3*time.Second, func() error {
		if err := noWrites(); err != nil {
			return err
		}
		return inConflict()
	})

	// Helm finishes: the HelmRelease holds the ConfigMap again.
	writeRevision(t, ns, release, 1, 2, "deployed")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 2)
	env.Consistently(t, time.Second, func() error {
		if err := noWrites(); err != nil {
			return err
		}
		return inConflict()
	})
	stop()
	setKey(t, ns, cmName, "drifted")
	waitForKey(t, ns, cmName, "from-helm")
}

// conflictWith returns a check that the ManifestLock registration/mlName
// reports object in Conflict, held by the HelmRelease cr.
func conflictWith(t *testing.T, registration, mlName, object, cr string) func() error {
	return func() error {
		ml := getManifestLock(t, registration, mlName)
		for _, p := range ml.Status.NotLocked {
			if p.Object == object && p.Reason == v1alpha1.ReasonConflict && strings.Contains(p.Message, cr) {
				return nil
			}
		}
		return fmt.Errorf("ManifestLock %s: state %q, notLocked %+v; want %s in Conflict, held by HelmRelease %s",
			mlName, ml.Status.State, ml.Status.NotLocked, object, cr)
	}
}

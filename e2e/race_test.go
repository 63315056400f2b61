package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestRemovalOnlyUpgradeIsNotReverted forces the race that confirmLocked
// (internal/controller/confirm.go) guards against: the locker sees a
// ConfigMap lose data.extra to `helm upgrade` while its release Secret
// watch, paused by the proxy but healthy, still shows revision 1 deployed.
// It must list the release afresh and not put the field back; once the
// Secret events arrive it must lock revision 2 and revert edits to it.
// Helm 3's upgrade here is an Update that only removes a field, which
// leaves Helm's managedFields time as it was, so only the write's Restores
// makes the locker list; Helm 4's apply moves the time, which does too.
func TestRemovalOnlyUpgradeIsNotReverted(t *testing.T) {
	t.Parallel()
	secrets := schema.GroupResource{Resource: "secrets"}
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			// A locker and proxy of its own: pausing the shared
			// locker's Secret watch would stall every other test.
			proxy := env.StartProxy(t)
			registration := env.Namespace(t)
			name := "race-" + v.String()
			locker, err := env.StartLockerWith(name, proxy.Kubeconfig(), "--namespace", registration, "--controller-name", name, "--leader-elect=false")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := locker.Stop(10 * time.Second); err != nil {
					t.Error(err)
				}
				if t.Failed() {
					t.Logf("--- log of %s ---\n%s", locker.Name, framework.LogTail(locker, 40))
				}
			})

			ns := env.Namespace(t)
			chart := framework.Chart(t, "configmaps")
			env.Helm(t, v, "install", "cms", chart, "-n", ns, "--set", "extra=optional")
			cr := env.RegisterIn(t, registration, ns, "cms")
			env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

			proxy.PauseWatches(secrets, true)
			// Given no values, helm upgrade would reuse the last ones.
			env.Helm(t, v, "upgrade", "cms", chart, "-n", ns, "--set", "extra=")
			// A wrong restore follows the removal within milliseconds.
			env.Consistently(t, 3*time.Second, func() error { return extraRemoved(t, ns) })
			// The case is what it says only if the locker saw the
			// removal as drift of revision 1 and held back because
			// the release had moved on.
			env.Eventually(t, 10*time.Second, func() error {
				hr := env.HelmReleaseIn(t, registration, cr)
				if hr.Status.Version != 1 || !hasProblem(hr, "HelmOperationInProgress") {
					return fmt.Errorf("HelmRelease %s: revision %d, notLocked %+v while the Secret watch is paused; want revision 1 with a write held back as HelmOperationInProgress", cr, hr.Status.Version, hr.Status.NotLocked)
				}
				return nil
			})

			proxy.PauseWatches(secrets, false)
			env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 2)
			setKey(t, ns, "cms-0", "edited after the upgrade")
			waitForKey(t, ns, "cms-0", "declared")
			if err := extraRemoved(t, ns); err != nil {
				t.Errorf("after reverting an edit to revision 2: %v", err)
			}
		})
	}
}

func extraRemoved(t *testing.T, ns string) error {
	obj := env.Get(t, "v1", "configmaps", ns, "cms-0")
	if obj == nil {
		return fmt.Errorf("ConfigMap %s/cms-0 does not exist", ns)
	}
	if got, found, _ := unstructured.NestedString(obj.Object, "data", "extra"); found {
		return fmt.Errorf("ConfigMap %s/cms-0 has data.extra = %q, which the upgrade removed", ns, got)
	}
	return nil
}

func hasProblem(hr *v1alpha1.HelmRelease, reason string) bool {
	for _, p := range hr.Status.NotLocked {
		if p.Reason == reason {
			return true
		}
	}
	return false
}

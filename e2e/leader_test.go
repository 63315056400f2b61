package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestLeaderHandover runs two lockers for one registration namespace, with
// the default leader flags. Only the Lease holder locks; when it stops,
// the other takes the Lease and reverts the next edit.
func TestLeaderHandover(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	flags := []string{"--namespace", registration, "--controller-name", "ha-locker"}
	first, err := env.StartLocker("ha-first", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Stop(10 * time.Second) }()
	// A failed wait shows the shared locker's log (env.Eventually);
	// who took, or failed to take, this Lease is in these lockers' own.
	lockers := []*framework.Locker{first}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range lockers {
				t.Log(framework.LogTail(l, 30))
			}
		}
	})
	holder := func() string { return leaseHolder(t, registration, "ha-locker") }
	env.Eventually(t, 30*time.Second, func() error {
		if holder() == "" {
			return fmt.Errorf("no one holds Lease %s/ha-locker", registration)
		}
		return nil
	})
	leader := holder()
	second, err := env.StartLocker("ha-second", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Stop(10 * time.Second) }()
	lockers = append(lockers, second)

	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterIn(t, registration, ns, "cms")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	// The standby keeps its caches warm, and writes nothing: the
	// leader corrects the edit.
	setKey(t, ns, "cms-0", "before handover")
	waitForRevert(t, ns)
	if log, _ := os.ReadFile(second.Log); strings.Contains(string(log), "Drift corrected") || strings.Contains(string(log), "Promoted") {
		t.Errorf("the standby corrected drift while %s led:\n%s", leader, log)
	}

	if err := first.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	env.Eventually(t, 30*time.Second, func() error {
		if h := holder(); h == "" || h == leader {
			return fmt.Errorf("Lease holder %q, want the second locker", h)
		}
		return nil
	})
	setKey(t, ns, "cms-0", "after handover")
	waitForKey(t, ns, "cms-0", "declared")
}

// leaseHolder returns who holds the Lease namespace/name, or "".
func leaseHolder(t *testing.T, namespace, name string) string {
	t.Helper()
	lease, err := env.Kube.CoordinationV1().Leases(namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// editor keeps patching field path of the ConfigMaps named until stop is
// called, as another controller or a person at a terminal would, and
// counts its edits.
type editor struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	edits  atomic.Int64
}

func startEditor(t *testing.T, ns string, names []string, patch func(i int64) string, every time.Duration) *editor {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	e := &editor{cancel: cancel}
	e.wg.Go(func() {
		for {
			for _, name := range names {
				n := e.edits.Add(1)
				_, _ = env.Dynamic.Resource(configMaps).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch(n)), metav1.PatchOptions{FieldManager: "editor"})
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	})
	return e
}

func (e *editor) stop() int64 {
	e.cancel()
	e.wg.Wait()
	return e.edits.Load()
}

// TestLockerKilledDuringDrifts SIGKILLs the locker while another client
// keeps editing locked objects, and starts it again: once the edits stop,
// every object is back as declared, and the lock says so.
func TestLockerKilledDuringDrifts(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	registration := env.Namespace(t)
	flags := []string{"--namespace", registration, "--controller-name", "killed-locker", "--leader-elect=false"}
	locker, err := env.StartLocker("killed-locker", flags...)
	if err != nil {
		t.Fatal(err)
	}
	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=5")
	cr := env.RegisterIn(t, registration, ns, "cms")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	names := []string{"cms-0", "cms-1", "cms-2", "cms-3", "cms-4"}
	ed := startEditor(t, ns, names, func(i int64) string { return fmt.Sprintf(`{"data":{"key":"edit %d"}}`, i) }, 50*time.Millisecond)
	time.Sleep(2 * time.Second)
	locker.Kill()
	time.Sleep(time.Second)
	locker, err = env.StartLocker("killed-locker-again", flags...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	time.Sleep(3 * time.Second)
	edits := ed.stop()
	t.Logf("%d edits, the locker killed after 2 s and restarted 1 s later", edits)

	for _, name := range names {
		waitForKey(t, ns, name, "declared")
	}
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	env.Consistently(t, time.Second, func() error {
		for _, name := range names {
			if got, _ := keyOf(t, ns, name); got != "declared" {
				return fmt.Errorf("ConfigMap %s/%s data.key = %q after the edits stopped", ns, name, got)
			}
		}
		return nil
	})
}

// TestHelmRunsWhileAnotherClientEdits runs 50 helm upgrades and rollbacks
// with each CLI while another client keeps editing the release's objects.
// No Helm operation fails, and the objects end as the last revision
// declares, held by the lock. For Helm 3 the client edits fields the chart
// sets; for Helm 4 fields it does not set, since server-side apply rightly
// refuses to take over a field another manager wrote while the lock was
// open.
func TestHelmRunsWhileAnotherClientEdits(t *testing.T) {
	t.Parallel()
	const runs = 50
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			cr := lockConfigMaps(t, v, ns, "cms", 3)
			names := []string{"cms-0", "cms-1", "cms-2"}
			patch := func(i int64) string { return fmt.Sprintf(`{"data":{"key":"edit %d"}}`, i) }
			if v == framework.Helm4 {
				patch = func(i int64) string { return fmt.Sprintf(`{"data":{"editor":"edit %d"}}`, i) }
			}
			ed := startEditor(t, ns, names, patch, 100*time.Millisecond)
			chart := framework.Chart(t, "configmaps")
			value := "declared"
			values := []string{"declared"} // by revision - 1
			for i := range runs {
				if i%3 == 2 {
					// Roll back to the revision before the last one.
					target := len(values) - 1
					env.Helm(t, v, "rollback", "cms", fmt.Sprint(target), "-n", ns)
					value = values[target-1]
				} else {
					value = fmt.Sprintf("run %d", i)
					env.Helm(t, v, "upgrade", "cms", chart, "-n", ns, "--set", "count=3,value="+value)
				}
				values = append(values, value)
			}
			edits := ed.stop()
			t.Logf("%d helm runs, %d edits", runs, edits)

			hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, runs+1)
			if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("Locked after the runs = %+v", c)
			}
			for _, name := range names {
				waitForKey(t, ns, name, value)
			}
			setKey(t, ns, "cms-0", "one more edit")
			waitForKey(t, ns, "cms-0", value)
		})
	}
}

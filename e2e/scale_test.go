package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

func TestTwentyReleasesRevertedTogether(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	const n = 20
	var crs []string
	for i := range n {
		v := framework.HelmVersions[i%2]
		release := fmt.Sprintf("r%02d", i)
		env.Helm(t, v, "install", release, framework.Chart(t, "configmaps"), "-n", ns)
		crs = append(crs, env.Register(t, ns, release))
	}
	for _, cr := range crs {
		env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), fmt.Sprintf("r%02d-0", i),
				types.MergePatchType, []byte(`{"data":{"key":"drifted"}}`), metav1.PatchOptions{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		waitForKey(t, ns, fmt.Sprintf("r%02d-0", i), "declared")
	}
}

// TestBackToBackEditsAreAllReverted sends 200 edits to the 20 ConfigMaps of
// one release with no pause between them, so many land while the locker is
// busy reverting the ones before. For every edit, a later version of the
// object must be back to the declared value: no edit falls into a blind
// window.
func TestBackToBackEditsAreAllReverted(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	const objects, edits = 20, 200
	lockConfigMaps(t, framework.Helm4, ns, "cms", objects)

	w, err := env.Dynamic.Resource(configMaps).Namespace(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	reverted := map[string]int64{} // latest resourceVersion seen with the declared value
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			obj := ev.Object.(*unstructured.Unstructured)
			if v, _, _ := unstructured.NestedString(obj.Object, "data", "key"); v == "declared" {
				rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				mu.Lock()
				reverted[obj.GetName()] = max(reverted[obj.GetName()], rv)
				mu.Unlock()
			}
		}
	}()

	lastEdit := map[string]int64{}
	for i := range edits {
		name := fmt.Sprintf("cms-%d", i%objects)
		rv, _ := strconv.ParseInt(setKey(t, ns, name, fmt.Sprintf("edit-%d", i)), 10, 64)
		lastEdit[name] = max(lastEdit[name], rv)
	}
	env.Eventually(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for name, rv := range lastEdit {
			if reverted[name] <= rv {
				return fmt.Errorf("ConfigMap %s: last edit at resourceVersion %d, last revert seen at %d", name, rv, reverted[name])
			}
		}
		return nil
	})
	for name := range lastEdit {
		if got, _ := keyOf(t, ns, name); got != "declared" {
			t.Errorf("ConfigMap %s data.key = %q after all edits, want declared", name, got)
		}
	}
}

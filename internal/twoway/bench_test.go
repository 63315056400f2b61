package twoway

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// BenchmarkRenderMemory is the live heap two-way locking keeps for each
// release once its first render is done, as Render leaves it: the
// render state (the target, the rendered target and the result: the
// Rendered condition and status.rerender with its lookups), the
// engine.Watch of the lookups, and the release's render_stale series.
// The result is that of internal/render's grafana-shaped dashboard chart
// rendered as stored, with the one lookup it makes when no admin password
// is set, of its own Secret.
// The informers' share (one per watched type, not per release) is not in
// it.
func BenchmarkRenderMemory(b *testing.B) {
	const releases = 1000
	manifest, err := os.ReadFile("../render/testdata/dashboard-helm-v3.22.0-template.yaml")
	if err != nil {
		b.Fatal(err)
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	var perRelease float64
	for b.Loop() {
		mapper := resettable{meta.NewDefaultRESTMapper(nil)}
		e := engine.New(dynamicfake.NewSimpleDynamicClient(scheme.Scheme), mapper, func(string) {}, engine.Options{})
		c := New(Config{ControllerName: "helm-locker", Kube: fake.NewClientset(), Mapper: mapper, Metrics: metrics.New(nil)}, e, &locks{})
		before := heapLive()
		for i := range releases {
			key := cache.NewObjectName("cattle-helm-system", fmt.Sprintf("web-%d", i))
			rk := v1alpha1.ReleaseKey{Namespace: fmt.Sprintf("apps-%d", i), Name: "web"}
			lookups := []render.Lookup{{GVR: secrets, Kind: "Secret", Namespace: rk.Namespace, Name: "web-dashboard"}}
			target := renderTarget{release: rk, revision: 1, digest: storage.Digest(string(manifest)), writer: "writer", mode: v1alpha1.RerenderReport}
			res := &renderResult{
				status: v1alpha1.RenderStatus{Revision: 1, Time: metav1.Now(), Lookups: []string{lookups[0].String()}},
				cond: condition(v1alpha1.ConditionRendered, true, v1alpha1.ReasonRendersAsStored,
					fmt.Sprintf("revision %d renders as stored against the cluster as it is now", target.revision)),
				readsAPIVersions: true,
			}
			rs := c.states.GetOrCreate(key, func() *renderState { return &renderState{} })
			rs.target, rs.rendered, rs.result = target, target, res
			c.cfg.Metrics.ObserveRender(rk.Namespace, rk.Name, renderOutcome(res), 0)
			c.watchLookups(key, rk, lookups)
		}
		perRelease = float64(heapLive()-before) / releases
		runtime.KeepAlive(c)
		c.ShutDown()
	}
	b.ReportMetric(perRelease, "live-B/release")
}

// heapLive is the heap's live bytes after a garbage collection. It
// collects twice: what sync.Pools hold survives one collection.
func heapLive() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

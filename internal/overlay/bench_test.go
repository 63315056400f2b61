package overlay

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/helm-locker/helm-locker/internal/artifact"
)

// BenchmarkBuild1000 builds an overlay of 1,000 objects (a base of 1,000
// ConfigMaps, an overlay that sets a namespace and a label), as a lock
// from a source does at each new revision, and reports what it allocates
// (B/op) and the live heap it leaves behind once built, the manifest
// included (MiB-live-after; not the peak during the build, which lies
// between the two).
func BenchmarkBuild1000(b *testing.B) {
	files := artifact.Files{}
	var resources strings.Builder
	for i := range 1000 {
		name := fmt.Sprintf("cm-%04d.yaml", i)
		files["base/"+name] = fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%04d\ndata:\n  key: value-%d\n  config: |\n    a: 1\n    b: [x, y]\n", i, i)
		resources.WriteString("- " + name + "\n")
	}
	files["base/kustomization.yaml"] = []byte("resources:\n" + resources.String())
	files["overlay/kustomization.yaml"] = []byte("namespace: apps\nlabels:\n- pairs: {team: web}\nresources:\n- ../base\n")
	var before, after runtime.MemStats
	b.ReportAllocs()
	var live uint64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		out, err := Build(files, "overlay", Limits{})
		runtime.ReadMemStats(&after)
		if err != nil || strings.Count(out, "kind: ConfigMap") != 1000 {
			b.Fatalf("Build: %v, %d objects", err, strings.Count(out, "kind: ConfigMap"))
		}
		live = max(live, after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))
	}
	b.ReportMetric(float64(live)/(1<<20), "MiB-live-after")
}

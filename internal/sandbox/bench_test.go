package sandbox

import (
	"context"
	"testing"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/manifest"
)

// BenchmarkRender renders the dashboard chart (grafana-shaped, as
// internal/render's BenchmarkRender) as a lock would after install, in
// the locker's process and in the sandbox, in the same run: what a
// render's process costs, in time and in the child's peak resident set.
func BenchmarkRender(b *testing.B) {
	empty, _ := cluster()
	rel := releaseOf(b, manifest.Helm3, dashboard(b), nil)
	installed, _ := cluster(objectsIn(b, rel, empty)...)
	ctx := context.Background()
	b.Run("InProcess", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := render.Render(ctx, rel, installed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Sandboxed", func(b *testing.B) {
		r := New(options(DefaultOptions()))
		var peak int64
		b.ReportAllocs()
		for b.Loop() {
			_, used, err := r.run(ctx, rel, installed)
			if err != nil {
				b.Fatal(err)
			}
			peak = max(peak, used.peakRSS)
		}
		b.ReportMetric(float64(peak)/(1<<20), "child-peak-RSS-MiB")
	})
}

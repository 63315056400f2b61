package render

import (
	"context"
	"testing"
)

// BenchmarkRender renders the dashboard chart (grafana-shaped: helpers,
// a generated password kept through a lookup of its own Secret, checksum
// annotations, a Capabilities branch) as a lock would after install: its
// objects in the cluster, the Secret found by lookup.
func BenchmarkRender(b *testing.B) {
	empty, _ := fakeCluster()
	rel := install(b, releaseOf(loadDashboard(b), nil, 1), empty)
	installed, _ := fakeCluster(objectsIn(b, rel.Manifest)...)
	stored := fromHelm3(rel)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(ctx, stored, installed); err != nil {
			b.Fatal(err)
		}
	}
}

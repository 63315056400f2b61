package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// benchManifest is a release of 25 objects, the benchmark's default M.
func benchManifest() string {
	var b strings.Builder
	for i := range 25 {
		fmt.Fprintf(&b, "---\n# Source: bench/templates/cm-%d.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\n  labels:\n    app.kubernetes.io/instance: bench\ndata:\n  key: declared\n  payload: %q\n", i, i, strings.Repeat("x", 1000))
	}
	return b.String()
}

// BenchmarkParseRelease reads one release's manifest as each Helm
// stores it: every release at a cold start.
func BenchmarkParseRelease(b *testing.B) {
	for _, h := range []Helm{Helm3, Helm4} {
		b.Run(fmt.Sprintf("helm%d", h), func(b *testing.B) {
			m := benchManifest()
			b.SetBytes(int64(len(m)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRelease(m, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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

func BenchmarkDecodeRelease(b *testing.B) {
	json := fmt.Sprintf(`{"name":"bench","namespace":"apps","version":1,"info":{"status":"deployed"},"manifest":%q,"chart":{"templates":[{"name":"t","data":%q}]}}`, benchManifest(), strings.Repeat("A", 20000))
	data := encode(b, json, true)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRelease(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkObjects(b *testing.B) {
	rel := &Release{Name: "bench", Namespace: "apps", Version: 1, Manifest: benchManifest()}
	b.SetBytes(int64(len(rel.Manifest)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Objects(rel); err != nil {
			b.Fatal(err)
		}
	}
}

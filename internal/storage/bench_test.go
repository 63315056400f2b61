package storage

import (
	"fmt"
	"strings"
	"testing"
)

func BenchmarkDecode(b *testing.B) {
	var m strings.Builder
	for i := range 25 {
		fmt.Fprintf(&m, "---\n# Source: bench/templates/cm-%d.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\ndata:\n  payload: %q\n", i, i, strings.Repeat("x", 1000))
	}
	json := fmt.Sprintf(`{"name":"bench","namespace":"apps","version":1,"info":{"status":"deployed"},"manifest":%q,"chart":{"templates":[{"name":"t","data":%q}]}}`, m.String(), strings.Repeat("A", 20000))
	data := encode(b, json, true)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

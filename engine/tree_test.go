package engine

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTreeReadsBackAsJSON holds a packed declaration to what its JSON
// reads back as, which is what declarations were kept as before trees:
// numbers, strings that are not UTF-8, and Go types a library's caller may
// put in an object.
func TestTreeReadsBackAsJSON(t *testing.T) {
	tests := map[string]any{
		"integers":        map[string]any{"a": int64(0), "b": int64(-7), "max": int64(math.MaxInt64), "min": int64(math.MinInt64)},
		"fractions":       map[string]any{"a": 1.5, "b": 0.1, "c": -2.25e-9, "d": 1e-7},
		"whole floats":    map[string]any{"a": 3.0, "zero": math.Copysign(0, -1), "big": 1e20, "huge": 1e21, "2^60": float64(1 << 60), "2^53+": float64(1<<53) * 3},
		"strings":         map[string]any{"bad": "a\xffb\xfe\xfd", "html": "<a href='x'>&</a>", "line": "a\u2028b", "empty": "", "emoji": "🔒"},
		"a key not UTF-8": map[string]any{"k\xff": "v"},
		"empty and null":  map[string]any{"map": map[string]any{}, "list": []any{}, "null": nil, "nested": []any{nil, []any{}, map[string]any{"x": nil}}},
		"Go types":        map[string]any{"int": 3, "int32": int32(-4), "float32": float32(0.1), "strings": map[string]string{"a": "b"}, "list": []string{"x", "y"}, "maps": []map[string]any{{"a": int64(1)}}, "uint": uint64(math.MaxUint64)},
		"bools":           map[string]any{"t": true, "f": false},
	}
	for name, fields := range tests {
		t.Run(name, func(t *testing.T) {
			in := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "fields": fields}}
			data, err := json.Marshal(in.Object)
			if err != nil {
				t.Fatal(err)
			}
			want := &unstructured.Unstructured{}
			if err := want.UnmarshalJSON(data); err != nil {
				t.Fatal(err)
			}
			packed, err := packDeclaration(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := unpackDeclaration(packed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.Object, got.Object); diff != "" {
				t.Errorf("read back (-JSON +tree):\n%s", diff)
			}
		})
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := packDeclaration(&unstructured.Unstructured{Object: map[string]any{"a": bad}}); err == nil {
			t.Errorf("packing %v gave no error, as JSON does", bad)
		}
	}
}

// TestTreeIsOrderFree: equal declarations pack to equal bytes, whatever
// order their maps were filled in, as digestOf needs.
func TestTreeIsOrderFree(t *testing.T) {
	keys := []string{"spec", "apiVersion", "metadata", "kind", "data", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"}
	fill := func(order []string) map[string]any {
		m := make(map[string]any)
		for _, k := range order {
			m[k] = map[string]any{"x" + k: k, "y": []any{k, int64(len(k))}}
		}
		return m
	}
	reversed := make([]string, len(keys))
	for i, k := range keys {
		reversed[len(keys)-1-i] = k
	}
	a, err := appendTree(nil, fill(keys))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b, err := appendTree(nil, fill(reversed))
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Fatal("the same object made two trees")
		}
	}
}

// TestTreeRejectsGarbage: bytes that are not a whole tree are an error,
// never a panic or an allocation their counts claim.
func TestTreeRejectsGarbage(t *testing.T) {
	good, err := appendTree(nil, obj(t, benchDeployment))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readTree(good); err != nil {
		t.Fatalf("a whole tree: %v", err)
	}
	for n := range len(good) {
		if _, err := readTree(good[:n]); err == nil {
			t.Errorf("the first %d of %d bytes read as a tree", n, len(good))
		}
	}
	if _, err := readTree(append(good[:len(good):len(good)], tagNull)); err == nil {
		t.Error("a tree with a byte after it read as a tree")
	}
	// A map that claims more entries than there are bytes.
	if _, err := readTree([]byte{tagMap, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Error("a map of 4 billion entries in 6 bytes read as a tree")
	}
	// Each byte changed: an error or a tree, never a panic.
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0xa5
		_, _ = readTree(bad)
	}
	if _, err := unpackDeclaration([]byte{}); err == nil {
		t.Error("nothing unpacked as a declaration")
	}
}

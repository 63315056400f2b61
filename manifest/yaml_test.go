package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sameAsJSON fails t unless decodeObject gives doc as the way through JSON
// does, where it gives anything.
func sameAsJSON(t testing.TB, doc []byte) {
	fast, ok := decodeObject(doc)
	if !ok {
		return // parseDocument takes the way through JSON
	}
	slow, err := parseJSON(doc)
	if err != nil {
		t.Fatalf("decodeObject took %q, which the way through JSON refuses: %v", doc, err)
	}
	if len(slow) != 1 || !reflect.DeepEqual(fast.Object, slow[0].Object) {
		t.Fatalf("decodeObject of %q = %#v; through JSON: %#v", doc, fast.Object, slow)
	}
}

// edgeDocuments are documents whose values JSON writes and reads back
// otherwise than YAML has them.
var edgeDocuments = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nints: [0, -0, 1, -1, 9223372036854775807, -9223372036854775808, 9223372036854775808, 18446744073709551615, 0x1F, 0o17, 017, 1_000]\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nfloats: [0.0, -0.0, 1.0, 1.5, -2.0, 1e3, 1e20, 1e21, 1e-6, 1e-7, 9.2e18, 9.3e18, 9223372036854775808.0, -9223372036854775808.0, 9007199254740993.0, 123456789012345678.0, 3.14159, 1e300, 5e-324]\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nspecial: [.inf, -.inf, .nan]\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nkeys: {1: a, -2: b, 1.5: c, true: d, false: e, 2.0: f, 1e3: g, yes: h, on: i}\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nbools: [true, false, yes, no, on, off, True, FALSE, y, n]\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nnulls: [null, ~, ]\nempty: {}\nlist: []\nnested: {a: {b: [1, {c: null}]}}\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nstrings: ['1', \"2.0\", '', 'yes', \"\\u2028\", \"\\xff\\xfe ok \\xc3\", \"caf\\u00e9\"]\n\"\\xff\": bad key\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\ntimes: [2001-12-14, 2001-12-14t21:59:43.10-05:00]\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\ntagged: !!timestamp 2001-12-14\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nbinary: !!binary aGVsbG8=\nbadbinary: !!binary //79\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nanchors: &a {x: 1}\nmerged: {<<: *a, y: 2}\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nblock: |\n  line one\n  line two\nfolded: >-\n  folded\n  text\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"X\", \"metadata\": {\"name\": \"a\"}, \"n\": 1.0, \"m\": [1e2, 2.50]}\n",
	"apiVersion: 1\nkind: X\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: 2\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: ''\nmetadata: {name: a}\n",
	"kind: X\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n",
	"- a\n- b\n",
	"just a string\n",
	"# only a comment\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\n? [complex, key]\n: v\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\nnull: v\n",
	"apiVersion: v1\nkind: X\nmetadata: {name: a}\ntwice: {2: a, 2.0: b}\n",
}

func TestDecodeObjectIsTheWayThroughJSON(t *testing.T) {
	for _, doc := range edgeDocuments {
		sameAsJSON(t, []byte(doc))
	}
	// Every YAML file of the repository's charts, rendered or not.
	files, _ := filepath.Glob("../e2e/testdata/charts/*/*.yaml")
	more, _ := filepath.Glob("../e2e/testdata/charts/*/crds/*.yaml")
	crds, _ := filepath.Glob("../api/*.yaml")
	files = append(append(files, more...), crds...)
	if len(files) == 0 {
		t.Fatal("found no YAML files to compare on")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitDocuments(string(data)) {
			sameAsJSON(t, []byte(doc+"\n"))
		}
	}
}

// TestDecodeObjectTakesObjects: the fast way takes the objects charts
// hold, and leaves what it cannot give as JSON would.
func TestDecodeObjectTakesObjects(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n", true},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicas: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 0.5}}}]}}}\n", true},
		{"apiVersion: v1\nkind: X\nmetadata: {name: a}\nspecial: .nan\n", false},
		{"apiVersion: v1\nkind: X\nmetadata: {name: a}\n? [complex, key]\n: v\n", false},
		{"kind: X\nmetadata: {name: a}\n", false},
		{"- a\n", false},
	} {
		if _, ok := decodeObject([]byte(tc.doc)); ok != tc.want {
			t.Errorf("decodeObject(%q) took it: %v, want %v", tc.doc, ok, tc.want)
		}
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, doc := range edgeDocuments {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if strings.Count(string(doc), "&") > 8 {
			t.Skip("alias bombs test YAML's parser, not this")
		}
		sameAsJSON(t, doc)
	})
}

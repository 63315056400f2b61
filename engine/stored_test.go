package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestStringFormIsStoredForm holds stringForm to what the API types' round
// trip makes of the same object: wherever it takes an object, its form
// must be storedForm's, and where it does not, the object is untouched.
func TestStringFormIsStoredForm(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// obj, if set, is the input in place of in: a value YAML
		// cannot say.
		obj  map[string]any
		fast bool
	}{
		{name: "a chart's ConfigMap", fast: true,
			in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns, labels: {app.kubernetes.io/name: x, empty: ''}, annotations: {a: b}}\ndata: {config.yaml: \"a: 1\\n\", empty: ''}\n"},
		{name: "empty optional fields", fast: true,
			in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: '', generateName: '', labels: {}, annotations: {}}\ndata: {}\n"},
		{name: "immutable false is kept", fast: true,
			in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nimmutable: false\n"},
		{name: "immutable true", fast: true,
			in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nimmutable: true\ndata: {a: b}\n"},
		{name: "a Secret's base64 with line breaks", fast: true,
			in: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque\ndata: {a: \"aGVs\\nbG8=\", b: '', c: eB==}\n"},
		{name: "a Secret's empty type, and stringData", fast: true,
			in: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: ''\nstringData: {a: hello, b: ''}\ndata: {}\n"},
		{name: "a Secret's base64 that does not decode",
			in: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: 'not base64!', b: \"aGVs\\nbG8=\"}\n"},
		{name: "binaryData", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nbinaryData: {a: \"aGVs\\nbG8=\"}\n"},
		{name: "a number where a string is", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {replicas: 3}\n"},
		{name: "a label that is a number", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {v: 1}}\n"},
		{name: "a field the API types do not have", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nspec: {a: b}\n"},
		{name: "finalizers", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, finalizers: [a]}\n"},
		{name: "a metadata field charts do not write", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, creationTimestamp: '2026-11-30T00:00:00Z'}\n"},
		{name: "another kind", in: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n"},
		{name: "another group", in: "apiVersion: example.com/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"},
		{name: "invalid UTF-8", obj: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c"}, "data": map[string]any{"a": "\xff"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.obj
			if in == nil {
				in = obj(t, tt.in)
			}
			fast := dropNulls(in).(map[string]any)
			if got := stringForm(fast); got != tt.fast {
				t.Fatalf("stringForm = %t, want %t", got, tt.fast)
			}
			if !tt.fast {
				if diff := cmp.Diff(in, fast); diff != "" {
					t.Errorf("stringForm changed an object it did not take (-before +after):\n%s", diff)
				}
				return
			}
			stored, ok := storedForm(&unstructured.Unstructured{Object: dropNulls(in).(map[string]any)})
			if !ok {
				t.Fatal("storedForm did not take the object stringForm took")
			}
			if diff := cmp.Diff(stored, fast); diff != "" {
				t.Errorf("stringForm (-storedForm +stringForm):\n%s", diff)
			}
		})
	}
}

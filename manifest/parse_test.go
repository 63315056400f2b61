package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// refs lists objects as kind/namespace/name.
func refs(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		// data is data.key of the first object, where it matters.
		data string
	}{
		{
			name: "documents, comments and a List",
			in: `# leading comment
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
---
# only a comment
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a, namespace: other}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: b}
---
`,
			want: []string{"ServiceAccount//web", "ConfigMap/other/a", "ClusterRole//b"},
		},
		{
			name: "JSON",
			in:   `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}, "data": {"key": "v"}}`,
			want: []string{"ConfigMap//j"},
			data: "v",
		},
		{
			// kubectl keeps a block scalar's line break at the end of a
			// document, and so does Parse.
			name: "block scalar ending a document",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  key: |\n    line\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\n",
			want: []string{"ConfigMap//c", "ConfigMap//d"},
			data: "line\n",
		},
		{
			name: "helm template output",
			in:   "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  key: x\n",
			want: []string{"ConfigMap//web"},
			data: "x",
		},
		{name: "empty", in: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, refs(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if tt.data != "" {
				if got, _, _ := unstructured.NestedString(objs[0].Object, "data", "key"); got != tt.data {
					t.Errorf("data.key = %q, want %q", got, tt.data)
				}
			}
		})
	}
}

func TestParseErrorsNameTheDocument(t *testing.T) {
	const good = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
	tests := []struct {
		name, in, want string
	}{
		{"no kind", good + "apiVersion: v1\nmetadata: {name: a}\n", "document 2: object has no kind"},
		{"no name", good + "# Source: web/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\n", "web/templates/b.yaml: ConfigMap has no metadata.name"},
		{"bad YAML", "apiVersion: v1\nkind: [\n", "document 1: "},
		{"not an object", good + "- a\n- b\n", "document 2: document is not an object"},
		{"bad List item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n", "document 1: List item 0: ConfigMap has no metadata.name"},
		{"bad separator", good + "--- !x\n", "invalid Yaml document separator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.in))
			var de *DocumentError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want a DocumentError containing %q", err, tt.want)
			}
		})
	}
}

func TestParseRelease(t *testing.T) {
	manifest := `---
# Source: web/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
---
# Source: web/templates/empty.yaml
# only a comment
---
# Source: web/templates/role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: web
---
# Source: web/templates/list.yaml
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a, namespace: other}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: b}
  data: {replicas: "3"}
`
	for _, h := range []Helm{Helm3, Helm4} {
		objs, err := ParseRelease(manifest, h)
		if err != nil {
			t.Fatal(err)
		}
		// Namespaces stay as declared: only the API server knows scopes.
		want := []string{"ServiceAccount//web", "ClusterRole//web", "ConfigMap/other/a", "ConfigMap//b"}
		if diff := cmp.Diff(want, refs(objs)); diff != "" {
			t.Errorf("%v: objects (-want +got):\n%s", h, diff)
		}
		if _, err := ParseRelease("# Source: web/templates/a.yaml\napiVersion: v1\nmetadata: {name: a}\n", h); err == nil || err.Error() != "web/templates/a.yaml: object has no kind" {
			t.Errorf("%v: ParseRelease error = %v", h, err)
		}
	}
}

// TestParseReleaseKeepsWhatEachHelmApplied is harbor's config, stored by
// each Helm: a "|+" block that ends in a blank line, last in its
// document. Helm 4 applies the blank line; Helm 3 trimmed it away before
// it stored the document.
func TestParseReleaseKeepsWhatEachHelmApplied(t *testing.T) {
	tests := []struct {
		h              Helm
		manifest, want string
	}{
		{Helm3, "---\n# Source: h/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobservice\ndata:\n  config.yml: |+\n    port: 8080\n---\n# Source: h/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n", "port: 8080\n"},
		{Helm4, "---\n# Source: h/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobservice\ndata:\n  config.yml: |+\n    port: 8080\n\n\n---\n# Source: h/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n\n", "port: 8080\n\n\n"},
	}
	for _, tt := range tests {
		objs, err := ParseRelease(tt.manifest, tt.h)
		if err != nil {
			t.Fatalf("%v: %v", tt.h, err)
		}
		if got, _, _ := unstructured.NestedString(objs[0].Object, "data", "config.yml"); got != tt.want || len(objs) != 2 {
			t.Errorf("%v: %d objects, config.yml = %q, want 2 and %q", tt.h, len(objs), got, tt.want)
		}
	}
}

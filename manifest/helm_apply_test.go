package manifest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// helmApplies decodes a manifest the way Helm's kube client Build does
// before it applies it: the whole manifest goes through cli-runtime's
// resource.Builder, whose StreamVisitor reads it with apimachinery's
// YAMLOrJSONDecoder, one RawExtension per document, skipping empty ones,
// and flattens Lists. What it returns is what Helm writes to the cluster.
func helmApplies(t testing.TB, manifest string) []map[string]any {
	t.Helper()
	d := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []map[string]any
	for {
		var ext runtime.RawExtension
		if err := d.Decode(&ext); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Skipf("Helm would refuse this manifest: %v", err)
		}
		raw := bytes.TrimSpace(ext.Raw)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			t.Skipf("Helm would refuse this manifest: %v", err)
		}
		if !obj.IsList() {
			out = append(out, obj.Object)
			continue
		}
		list, err := obj.ToList()
		if err != nil {
			t.Skipf("Helm would refuse this manifest: %v", err)
		}
		for _, item := range list.Items {
			out = append(out, item.Object)
		}
	}
}

// Manifests as Helm stores them: every document is "---", a Source
// comment and the template's output, trimmed, then one line break.
var appliedCases = []string{
	"---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  policy.yaml: |\n    strategy: PodAntiAffinity\n",
	"---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  config.yaml: |\n    {}\n---\n# Source: c/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  nginx.conf: |\n    events {}\n    http {}\n",
	"---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  kept: |+\n    x\n\n  stripped: |-\n    y\n  folded: >\n    a\n    b\n",
	"---\n# Source: c/templates/list.yaml\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    f: |\n      last\n",
	"---\n# Source: c/templates/s.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n    abc\n    -----END CERTIFICATE-----\n",
}

// TestParseHelmIsWhatHelmApplies holds the parser to Helm's own decoding of
// the whole manifest: a block scalar that ends a document keeps its final
// line break, as it does when Helm applies it, so the lock never writes a
// value Helm did not apply.
func TestParseHelmIsWhatHelmApplies(t *testing.T) {
	for _, m := range appliedCases {
		checkApplied(t, m)
	}
}

func FuzzParseHelmIsWhatHelmApplies(f *testing.F) {
	for _, m := range appliedCases {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, m string) {
		// Helm writes each stored document as "---", a Source line,
		// the trimmed template output and one line break.
		var b strings.Builder
		for _, doc := range strings.Split(m, "\n---\n") {
			if doc = strings.TrimSpace(doc); doc != "" && !strings.HasPrefix(doc, "---") {
				b.WriteString("---\n# Source: c/templates/t.yaml\n" + doc + "\n")
			}
		}
		checkApplied(t, b.String())
	})
}

func checkApplied(t *testing.T, manifest string) {
	t.Helper()
	want := helmApplies(t, manifest)
	objs, err := ParseHelm(manifest)
	if err != nil {
		t.Skipf("the locker refuses this manifest: %v", err)
	}
	var got []map[string]any
	for _, o := range objs {
		got = append(got, o.Object)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseHelm(%q) differs from what Helm applies (-Helm +got):\n%s", manifest, diff)
	}
}

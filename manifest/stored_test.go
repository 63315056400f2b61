package manifest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	releaseutil3 "helm.sh/helm/v3/pkg/releaseutil"
	releaseutil4 "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/resource"
)

// stored is the manifest Helm h stores for one template's output, as its
// action.Configuration.renderResources builds it: the output split into
// documents by h's releaseutil.SortManifests, each written as "---", a
// Source line, the document and a line break. ok is false when h would
// refuse the output.
func stored(h Helm, out string) (manifest string, ok bool) {
	files := map[string]string{"c/templates/t.yaml": out}
	var b strings.Builder
	if h == Helm3 {
		_, ms, err := releaseutil3.SortManifests(files, nil, releaseutil3.InstallOrder)
		if err != nil {
			return "", false
		}
		for _, m := range ms {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
		}
		return b.String(), true
	}
	_, ms, err := releaseutil4.SortManifests(files, nil, releaseutil4.InstallOrder)
	if err != nil {
		return "", false
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	return b.String(), true
}

// applied decodes a stored manifest as Helm's kube.Client.Build does
// before it applies it, Helm 3's and Helm 4's alike: cli-runtime's
// resource.Builder reads the manifest as one stream, flattens Lists, and
// hands each object to the apply. Only the REST mapping, which needs a
// server, is left out (Local); an object it could not map (no apiVersion,
// kind or name) Helm refuses too. ok is false when Helm would refuse it.
func applied(manifest string) (objs []map[string]any, ok bool) {
	build := func(flatten bool) ([]*resource.Info, error) {
		b := resource.NewLocalBuilder().Unstructured().ContinueOnError()
		if flatten {
			b = b.Flatten()
		}
		return b.Stream(strings.NewReader(manifest), "").Do().Infos()
	}
	infos, err := build(false)
	if err != nil {
		return nil, false
	}
	// A List is mapped, as any object, before it is flattened.
	for _, info := range infos {
		if gvk := info.Object.GetObjectKind().GroupVersionKind(); gvk.Version == "" || gvk.Kind == "" {
			return nil, false
		}
	}
	if infos, err = build(true); err != nil {
		return nil, false
	}
	for _, info := range infos {
		obj := info.Object.(*unstructured.Unstructured)
		if validate(obj) != nil {
			return nil, false
		}
		objs = append(objs, obj.Object)
	}
	return objs, true
}

// Template outputs written as widely used charts write them.
var templateOutputs = []string{
	// harbor: a "|+" block that ends in a blank line, last in its document.
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobservice\ndata:\n  config.yml: |+\n    protocol: \"http\"\n    port: 8080\n\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  kept: |+\n    x\n\n\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  nginx.conf: |\n    events {}\n",
	"\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  policy.yaml: |\n    strategy: PodAntiAffinity\n",
	"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  kept: |+\n    x\n\n  stripped: |-\n    y\n  folded: >\n    a\n    b\n\n\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    f: |+\n      last\n\n",
	"apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n    abc\n    -----END CERTIFICATE-----\n",
	"# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n   \n",
}

func checkStored(t *testing.T, h Helm, out string) {
	t.Helper()
	m, ok := stored(h, out)
	if !ok {
		t.Skip("Helm refuses this output")
	}
	want, ok := applied(m)
	if !ok {
		t.Skip("Helm refuses this manifest")
	}
	objs, err := ParseRelease(m, h)
	if err != nil {
		t.Fatalf("ParseRelease(%q, %v): %v, where %v applies it", m, h, err, h)
	}
	var got []map[string]any
	for _, o := range objs {
		got = append(got, o.Object)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseRelease(%q, %v) differs from what %v applies (-Helm +got):\n%s", m, h, h, diff)
	}
}

// TestParseReleaseIsWhatHelmApplies holds each Helm's reading to that
// Helm's own code: the manifest it stores for a template's output, and
// what its apply path decodes from it.
func TestParseReleaseIsWhatHelmApplies(t *testing.T) {
	for _, h := range []Helm{Helm3, Helm4} {
		for i, out := range templateOutputs {
			t.Run(fmt.Sprintf("%v/%d", h, i), func(t *testing.T) { checkStored(t, h, out) })
		}
	}
}

func FuzzParseReleaseHelm3(f *testing.F) {
	for _, out := range templateOutputs {
		f.Add(out)
	}
	f.Fuzz(func(t *testing.T, out string) { checkStored(t, Helm3, out) })
}

func FuzzParseReleaseHelm4(f *testing.F) {
	for _, out := range templateOutputs {
		f.Add(out)
	}
	f.Fuzz(func(t *testing.T, out string) { checkStored(t, Helm4, out) })
}

package render

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	chartutilv3 "helm.sh/helm/v3/pkg/chartutil"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/helm-locker/helm-locker/manifest"
)

// webapp is the e2e suite's chart written as bitnami's are: built on a
// library chart (common) and with a cache subchart, itself on common,
// enabled by a condition and looking up a ConfigMap.
const webapp = "../../e2e/testdata/charts/webapp"

// chartDir is dir's files by slash-separated path under prefix, as an
// artifact holds a chart's folder.
func chartDir(t *testing.T, dir, prefix string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[prefix+filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// cacheSettings is the ConfigMap the cache subchart looks up.
func cacheSettings(maxMemory string) runtime.Object {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cache-settings", "namespace": "apps"},
		"data":     map[string]any{"maxmemory": maxMemory}}}
}

// TestWithChart: a revision of a chart with a library dependency and a
// subchart, as each Helm's SDK stores it, cannot be rendered from its
// Secret; with its source's files it renders as stored, subchart objects
// and lookups included, and a change of the subchart's lookup target
// changes the subchart's object.
func TestWithChart(t *testing.T) {
	for _, h := range helms {
		for _, tt := range []struct {
			name   string
			values map[string]any
			prefix string
			cache  bool
		}{
			{"packaged", nil, "webapp/", true},
			{"folder at the root", nil, "", true},
			{"subchart disabled", map[string]any{"cache": map[string]any{"enabled": false}}, "webapp/", false},
		} {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				rel, err := DecodeUntrusted(installedBy(t, h, webapp, tt.values), "apps", "web")
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Contains(rel.Manifest, "web-cache"); got != tt.cache {
					t.Fatalf("%s stored the cache's objects: %t, want %t:\n%s", h, got, tt.cache, rel.Manifest)
				}
				c, _ := fakeCluster()
				_, err = Render(context.Background(), rel, c)
				var nr *NotRenderableError
				if !errors.As(err, &nr) || !slices.Contains(nr.Dependencies, "common") {
					t.Fatalf("the stored chart rendered with %v, want a *NotRenderableError naming common", err)
				}

				withChart, err := rel.WithChart(chartDir(t, webapp, tt.prefix))
				if err != nil {
					t.Fatal(err)
				}
				out, err := Render(context.Background(), withChart, c)
				if err != nil {
					t.Fatal(err)
				}
				if changes, err := withChart.Compare(out.Manifest, out.Manifest); err != nil || len(changes) != 0 {
					t.Errorf("rendered from its source, Compare = %+v, %v; want no change:\n%s", changes, err, out.Manifest)
				}
				if got := slices.ContainsFunc(out.Lookups, func(l Lookup) bool { return l.Name == "cache-settings" }); got != tt.cache {
					t.Errorf("lookups %v name the subchart's cache-settings: %t, want %t", out.Lookups, got, tt.cache)
				}
				if !tt.cache {
					return
				}

				c, _ = fakeCluster(cacheSettings("256mb"))
				out, err = Render(context.Background(), withChart, c)
				if err != nil {
					t.Fatal(err)
				}
				changes, err := withChart.Compare(out.Manifest, out.Manifest)
				if err != nil || len(changes) != 1 || changes[0].Object != "ConfigMap web-cache" && changes[0].Object != "ConfigMap apps/web-cache" {
					t.Fatalf("with the lookup target changed, Compare = %+v, %v; want the cache's ConfigMap", changes, err)
				}
				if !slices.Contains(changes[0].Paths, "/data/cache.conf") {
					t.Errorf("changed paths %v, want /data/cache.conf", changes[0].Paths)
				}

				// The sandbox's child renders what its parent does.
				raw, err := withChart.EncodeForSandbox()
				if err != nil {
					t.Fatal(err)
				}
				again, err := DecodeUnchecked(rel.Helm, raw)
				if err != nil {
					t.Fatal(err)
				}
				twice, err := Render(context.Background(), again, c)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(out, twice); diff != "" {
					t.Errorf("decoded in the sandbox, the render differs (-parent +child):\n%s", diff)
				}
			})
		}
	}
}

// TestWithChartMismatch: a source whose chart's own files are not those
// the revision stored is refused, naming the first file that differs; a
// subchart, which Helm does not store, is the source's word.
func TestWithChartMismatch(t *testing.T) {
	edit := func(files map[string][]byte, name, old, new string) {
		files[name] = []byte(strings.Replace(string(files[name]), old, new, 1))
	}
	tests := []struct {
		name          string
		change        func(files map[string][]byte)
		file, problem string
	}{
		{"a template", func(f map[string][]byte) {
			edit(f, "webapp/templates/service.yaml", "targetPort: http", "targetPort: 8080")
		}, "templates/service.yaml", "differs"},
		{"the chart's version", func(f map[string][]byte) { edit(f, "webapp/Chart.yaml", "1.4.2", "1.4.3") }, "Chart.yaml", "differs"},
		{"a default value", func(f map[string][]byte) { edit(f, "webapp/values.yaml", "replicaCount: 1", "replicaCount: 2") }, "values.yaml", "differs"},
		{"a comment in values.yaml", func(f map[string][]byte) { edit(f, "webapp/values.yaml", "# Default values", "# The values") }, "", ""},
		{"a template added", func(f map[string][]byte) {
			f["webapp/templates/extra.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")
		}, "templates/extra.yaml", "is in the source, and was not stored"},
		{"a template taken out", func(f map[string][]byte) { delete(f, "webapp/templates/NOTES.txt") }, "templates/NOTES.txt", "is stored, and not in the source"},
		{"a file added", func(f map[string][]byte) { f["webapp/README.md"] = []byte("# webapp\n") }, "README.md", "is in the source, and was not stored"},
		{"a subchart's template", func(f map[string][]byte) {
			edit(f, "webapp/charts/cache/templates/service.yaml", "ClusterIP", "NodePort")
		}, "", ""},
	}
	for _, h := range helms {
		rel, err := DecodeUntrusted(installedBy(t, h, webapp, nil), "apps", "web")
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				files := chartDir(t, webapp, "webapp/")
				tt.change(files)
				_, err := rel.WithChart(files)
				var mismatch *ChartMismatchError
				switch {
				case tt.file == "" && err != nil:
					t.Fatalf("WithChart: %v, want the chart taken", err)
				case tt.file == "":
				case !errors.As(err, &mismatch):
					t.Fatalf("WithChart error %v, want a *ChartMismatchError", err)
				case mismatch.File != tt.file || mismatch.Problem != tt.problem || mismatch.Chart != "webapp-1.4.2" || mismatch.Revision != 1:
					t.Errorf("mismatch %+v, want %s %q of webapp-1.4.2 revision 1", mismatch, tt.file, tt.problem)
				case !strings.Contains(err.Error(), tt.file):
					t.Errorf("error %q does not name %s", err, tt.file)
				}
			})
		}
	}
}

// TestWithChartAfterReusedValues: an upgrade that reuses values (`helm
// upgrade --reuse-values`, or the locker's own in Upgrade mode) stores the
// previous revision's values, coalesced with the user's, as the chart's;
// the source's chart is still the stored one.
func TestWithChartAfterReusedValues(t *testing.T) {
	values := map[string]any{"replicaCount": 2, "cache": map[string]any{"settings": map[string]any{"defaultMaxMemory": "128mb"}}}
	for _, h := range helms {
		t.Run(h.String(), func(t *testing.T) {
			rel, err := DecodeUntrusted(installedBy(t, h, webapp, values), "apps", "web")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rel.WithChart(chartDir(t, webapp, "webapp/")); err != nil {
				t.Fatalf("as installed: %v", err)
			}
			// Revision 2 as Helm's upgrade stores it.
			switch s := rel.sdk.(type) {
			case helm3:
				s.rel.Chart.Values, err = chartutilv3.CoalesceValues(s.rel.Chart, s.rel.Config)
			case helm4:
				s.rel.Chart.Values, err = commonutil.CoalesceValues(s.rel.Chart, s.rel.Config)
			}
			if err != nil {
				t.Fatal(err)
			}
			withChart, err := rel.WithChart(chartDir(t, webapp, "webapp/"))
			if err != nil {
				t.Fatalf("after values were reused: %v", err)
			}
			c, _ := fakeCluster()
			out, err := Render(context.Background(), withChart, c)
			if err != nil {
				t.Fatal(err)
			}
			if changes, err := withChart.Compare(out.Manifest, out.Manifest); err != nil || len(changes) != 0 {
				t.Errorf("Compare = %+v, %v; want no change", changes, err)
			}
		})
	}
}

// TestWithChartInvalid: what holds no chart Helm loads is an
// *InvalidChartError, and the release it was offered to is unchanged.
func TestWithChartInvalid(t *testing.T) {
	rel, err := DecodeUntrusted(installedBy(t, manifest.Helm4, webapp, nil), "apps", "web")
	if err != nil {
		t.Fatal(err)
	}
	two := chartDir(t, webapp, "webapp/")
	maps.Copy(two, map[string][]byte{"other/Chart.yaml": []byte("apiVersion: v2\nname: other\nversion: 1.0.0\n")})
	for name, files := range map[string]map[string][]byte{
		"no Chart.yaml":        {"webapp/values.yaml": []byte("a: 1\n")},
		"two top-level charts": two,
		"Chart.yaml unparsed":  {"Chart.yaml": []byte("name: [\n")},
		"values.yaml unparsed": {"Chart.yaml": []byte("apiVersion: v2\nname: webapp\nversion: 1.4.2\n"), "values.yaml": []byte("a: [\n")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rel.WithChart(files)
			var invalid *InvalidChartError
			if !errors.As(err, &invalid) {
				t.Errorf("WithChart error %v, want an *InvalidChartError", err)
			}
			if rel.dependencies == nil {
				t.Error("WithChart changed the release it was given")
			}
		})
	}
}

package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	chartv3 "helm.sh/helm/v3/pkg/chart"
	loaderv3 "helm.sh/helm/v3/pkg/chart/loader"
	chartutilv3 "helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv4 "helm.sh/helm/v4/pkg/chart/v2"
	loaderv4 "helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutilv4 "helm.sh/helm/v4/pkg/chart/v2/util"
)

// A chart from its source: Helm stores a release's chart without its
// dependencies, so a chart built on a library chart cannot be rendered
// from its release, and a parent renders none of its subcharts' objects
// and lookups. A HelmRelease's spec.chartRef names the chart as Flux's
// source-controller packaged it, dependencies included; WithChart renders
// that chart in place of the stored one, once its own files are shown to
// be the ones the revision stored.

// ChartMismatchError says a chart's source holds another chart than the
// one the revision stored: File is the first of the chart's own files that
// differs (Chart.yaml, Chart.lock, values.yaml, values.schema.json, then
// templates and other files by path), and Problem how.
type ChartMismatchError struct {
	// Chart is the stored chart's name-version, Revision the revision.
	Chart    string
	Revision int
	File     string
	Problem  string
}

func (e *ChartMismatchError) Error() string {
	return fmt.Sprintf("the source's chart is not chart %s as revision %d stored it: %s %s", e.Chart, e.Revision, e.File, e.Problem)
}

// InvalidChartError says a chart's source holds no chart Helm's loader
// loads.
type InvalidChartError struct{ Err error }

func (e *InvalidChartError) Error() string {
	return "the source holds no chart Helm loads: " + e.Err.Error()
}

func (e *InvalidChartError) Unwrap() error { return e.Err }

// WithChart returns a Release that renders the chart files hold, its
// dependencies included, in place of the chart r stored, with r's stored
// user values. files are an artifact's, by slash-separated path: a
// packaged chart (its files in one top-level folder) or a chart's folder
// at the root. The chart is loaded with the loader of the Helm that wrote
// r, and processed as that Helm's install processed it (dependencies
// enabled by r's values, values imported); it is used only if its own
// files are then r's stored chart's, byte for byte where Helm stores bytes
// (templates, other files, the schema) and as Helm stored them otherwise
// (Chart.yaml's metadata, Chart.lock, the default values): else a
// *ChartMismatchError names the first that differs. A chart that does not
// load is an *InvalidChartError. Its subcharts cannot be compared, since
// Helm stored none: their trust is the source's.
func (r *Release) WithChart(files map[string][]byte) (*Release, error) {
	src, err := chartFiles(files)
	if err != nil {
		return nil, &InvalidChartError{Err: err}
	}
	out := *r
	out.dependencies = nil
	out.readsAPIVersions, out.readsKubeVersion = false, false
	var stored, loaded chartContent
	switch s := r.sdk.(type) {
	case helm3:
		ch, err := loadV3(src)
		if err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		if err := chartutilv3.ProcessDependenciesWithMerge(ch, s.rel.Config); err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		stored, loaded = contentV3(s.rel.Chart), contentV3(ch)
		out.sdk = helm3{rel: s.rel, source: src}
		walkV3(ch, func(c *chartv3.Chart) {
			for _, t := range c.Templates {
				out.readTemplate(t.Data)
			}
		})
	case helm4:
		ch, err := loadV4(src)
		if err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		if err := chartutilv4.ProcessDependencies(ch, s.rel.Config); err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		stored, loaded = contentV4(s.rel.Chart), contentV4(ch)
		out.sdk = helm4{rel: s.rel, source: src}
		walkV4(ch, func(c *chartv4.Chart) {
			for _, t := range c.Templates {
				out.readTemplate(t.Data)
			}
		})
	default:
		return nil, fmt.Errorf("revision %d of release %s/%s has no chart to render", r.Version, r.Namespace, r.Name)
	}
	if file, problem := stored.differ(loaded); file != "" {
		return nil, &ChartMismatchError{Chart: r.Chart, Revision: r.Version, File: file, Problem: problem}
	}
	return &out, nil
}

// fromSource says r renders its chart's source (see WithChart).
func (r *Release) fromSource() bool {
	switch s := r.sdk.(type) {
	case helm3:
		return s.source != nil
	case helm4:
		return s.source != nil
	}
	return false
}

// chartFile is one file of a chart's source, by its path in the chart.
type chartFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// chartFiles are files' files of the chart, with paths relative to the
// chart's folder, sorted: the artifact's root if it holds Chart.yaml, else
// its one top-level folder, as `helm package` makes it.
func chartFiles(files map[string][]byte) ([]chartFile, error) {
	prefix := ""
	if _, ok := files["Chart.yaml"]; !ok {
		tops := map[string]bool{}
		for p := range files {
			top, _, _ := strings.Cut(p, "/")
			tops[top] = true
		}
		for top := range tops {
			if _, ok := files[top+"/Chart.yaml"]; ok && len(tops) == 1 {
				prefix = top + "/"
			}
		}
		if prefix == "" {
			return nil, fmt.Errorf("no Chart.yaml at its root, or in its one top-level folder")
		}
	}
	var out []chartFile
	for p, data := range files {
		if name, ok := strings.CutPrefix(p, prefix); ok && name != "" {
			out = append(out, chartFile{Name: path.Clean(name), Data: data})
		}
	}
	slices.SortFunc(out, func(a, b chartFile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func loadV3(files []chartFile) (*chartv3.Chart, error) {
	buffered := make([]*loaderv3.BufferedFile, len(files))
	for i, f := range files {
		buffered[i] = &loaderv3.BufferedFile{Name: f.Name, Data: f.Data}
	}
	return loaderv3.LoadFiles(buffered)
}

func loadV4(files []chartFile) (*chartv4.Chart, error) {
	buffered := make([]*archive.BufferedFile, len(files))
	for i, f := range files {
		buffered[i] = &archive.BufferedFile{Name: f.Name, Data: f.Data}
	}
	return loaderv4.LoadFiles(buffered)
}

func walkV3(c *chartv3.Chart, visit func(*chartv3.Chart)) {
	visit(c)
	for _, d := range c.Dependencies() {
		walkV3(d, visit)
	}
}

func walkV4(c *chartv4.Chart, visit func(*chartv4.Chart)) {
	visit(c)
	for _, d := range c.Dependencies() {
		walkV4(d, visit)
	}
}

// chartContent is what Helm stores of a chart's own files, in one form
// for both Helms: JSON for what it stores parsed, bytes for the rest.
type chartContent struct {
	metadata, lock, values []byte
	schema                 []byte
	templates, files       map[string][]byte
}

func contentV3(c *chartv3.Chart) chartContent {
	out := chartContent{metadata: jsonOf(c.Metadata), lock: jsonOf(c.Lock), values: jsonOf(c.Values), schema: c.Schema,
		templates: map[string][]byte{}, files: map[string][]byte{}}
	for _, t := range c.Templates {
		out.templates[t.Name] = t.Data
	}
	for _, f := range c.Files {
		out.files[f.Name] = f.Data
	}
	return out
}

func contentV4(c *chartv4.Chart) chartContent {
	out := chartContent{metadata: jsonOf(c.Metadata), lock: jsonOf(c.Lock), values: jsonOf(c.Values), schema: c.Schema,
		templates: map[string][]byte{}, files: map[string][]byte{}}
	add := func(m map[string][]byte, files []*common.File) {
		for _, f := range files {
			m[f.Name] = f.Data
		}
	}
	add(out.templates, c.Templates)
	add(out.files, c.Files)
	return out
}

// jsonOf is v as Helm's storage encodes it, and as it decodes back: a
// map's keys sorted, numbers as JSON has them. A nil map and an empty one
// are alike, as they are to a template.
func jsonOf(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		return []byte(err.Error())
	}
	var back any
	if err := json.Unmarshal(raw, &back); err != nil {
		return raw
	}
	if m, ok := back.(map[string]any); ok && len(m) == 0 {
		back = nil
	}
	raw, _ = json.Marshal(back)
	return raw
}

// differ names the first of c's files that other does not have as c has
// it, and how; "" if none.
func (c chartContent) differ(other chartContent) (file, problem string) {
	for _, f := range []struct {
		name string
		a, b []byte
	}{
		{"Chart.yaml", c.metadata, other.metadata},
		{"Chart.lock", c.lock, other.lock},
		{"values.yaml", c.values, other.values},
		{"values.schema.json", c.schema, other.schema},
	} {
		if !bytes.Equal(f.a, f.b) {
			return f.name, "differs"
		}
	}
	for _, set := range []struct{ a, b map[string][]byte }{{c.templates, other.templates}, {c.files, other.files}} {
		names := make([]string, 0, len(set.a)+len(set.b))
		for n := range set.a {
			names = append(names, n)
		}
		for n := range set.b {
			if _, ok := set.a[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			a, inStored := set.a[n]
			b, inSource := set.b[n]
			switch {
			case !inSource:
				return n, "is stored, and not in the source"
			case !inStored:
				return n, "is in the source, and was not stored"
			case !bytes.Equal(a, b):
				return n, "differs"
			}
		}
	}
	return "", ""
}

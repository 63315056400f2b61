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
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
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
	var stored, loaded, reused chartContent
	switch s := r.sdk.(type) {
	case helm3:
		ch, again, err := processedV3(src, s.rel.Config)
		if err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		stored, loaded, reused = contentV3(s.rel.Chart), contentV3(ch), contentV3(again)
		out.sdk = helm3{rel: s.rel, source: src}
		walkV3(ch, func(c *chartv3.Chart) {
			for _, t := range c.Templates {
				out.readTemplate(t.Data)
			}
		})
	case helm4:
		ch, again, err := processedV4(src, s.rel.Config)
		if err != nil {
			return nil, &InvalidChartError{Err: err}
		}
		stored, loaded, reused = contentV4(s.rel.Chart), contentV4(ch), contentV4(again)
		out.sdk = helm4{rel: s.rel, source: src}
		walkV4(ch, func(c *chartv4.Chart) {
			for _, t := range c.Templates {
				out.readTemplate(t.Data)
			}
		})
	default:
		return nil, fmt.Errorf("revision %d of release %s/%s has no chart to render", r.Version, r.Namespace, r.Name)
	}
	if bytes.Equal(stored.values, reused.values) {
		loaded.values = reused.values
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

// SourceChartV3 is, for a revision Helm 3 wrote that renders its chart's
// source (see WithChart), that chart loaded afresh in Helm 3's types,
// dependencies included, for an upgrade to render with: Helm's upgrade
// changes the chart it is given. It is nil for any other Release.
func (r *Release) SourceChartV3() (*chartv3.Chart, error) {
	if s, ok := r.sdk.(helm3); ok && s.source != nil {
		return s.chart()
	}
	return nil, nil
}

// SourceChartV4 is SourceChartV3 for a revision Helm 4 wrote, in Helm 4's
// types.
func (r *Release) SourceChartV4() (*chartv4.Chart, error) {
	if s, ok := r.sdk.(helm4); ok && s.source != nil {
		return s.chart()
	}
	return nil, nil
}

// SourceTemplates are the paths of every template of the chart's source,
// subcharts' included, as Helm names each in a manifest's "# Source:"
// comments (chart/templates/..., chart/charts/sub/templates/...); nil for
// a Release that renders its stored chart.
func (r *Release) SourceTemplates() []string {
	var paths []string
	switch s := r.sdk.(type) {
	case helm3:
		if ch, err := s.chart(); err == nil && s.source != nil {
			walkV3(ch, func(c *chartv3.Chart) {
				for _, t := range c.Templates {
					paths = append(paths, c.ChartFullPath()+"/"+t.Name)
				}
			})
		}
	case helm4:
		if ch, err := s.chart(); err == nil && s.source != nil {
			walkV4(ch, func(c *chartv4.Chart) {
				for _, t := range c.Templates {
					paths = append(paths, c.ChartFullPath()+"/"+t.Name)
				}
			})
		}
	}
	return paths
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

// processedV3 is the chart of files as Helm 3 stores it with user values
// config: as an install does (ProcessDependenciesWithMerge: dependencies
// enabled by the values, values imported), and again as an upgrade that
// reuses values does, which stores the previous revision's values,
// coalesced with config, as the chart's: after `helm upgrade
// --reuse-values`, or the locker's own upgrade, of the same chart.
func processedV3(files []chartFile, config map[string]any) (installed, reused *chartv3.Chart, err error) {
	if installed, err = loadV3(files); err == nil {
		err = chartutilv3.ProcessDependenciesWithMerge(installed, config)
	}
	if err != nil {
		return nil, nil, err
	}
	if reused, err = loadV3(files); err != nil {
		return nil, nil, err
	}
	if reused.Values, err = chartutilv3.CoalesceValues(&chartv3.Chart{Metadata: installed.Metadata, Values: installed.Values}, config); err == nil {
		err = chartutilv3.ProcessDependenciesWithMerge(reused, config)
	}
	return installed, reused, err
}

// processedV4 is processedV3 for Helm 4, whose install and upgrade
// process dependencies with ProcessDependencies.
func processedV4(files []chartFile, config map[string]any) (installed, reused *chartv4.Chart, err error) {
	if installed, err = loadV4(files); err == nil {
		err = chartutilv4.ProcessDependencies(installed, config)
	}
	if err != nil {
		return nil, nil, err
	}
	if reused, err = loadV4(files); err != nil {
		return nil, nil, err
	}
	if reused.Values, err = commonutil.CoalesceValues(&chartv4.Chart{Metadata: installed.Metadata, Values: installed.Values}, config); err == nil {
		err = chartutilv4.ProcessDependencies(reused, config)
	}
	return installed, reused, err
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

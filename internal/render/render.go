package render

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
)

// Cluster is what a chart may read of the cluster it is rendered for:
// Helm gives templates the server's version and API versions as
// .Capabilities, and the objects `lookup` finds.
type Cluster struct {
	// KubeVersion is the GitVersion the API server's /version gives,
	// such as "v1.36.3", as Helm takes it from discovery.
	KubeVersion string
	// APIVersions are the served API versions, "group/version" and
	// "group/version/Kind", as Helm's action.GetVersionSet lists them.
	APIVersions []string
	// Client reads what the chart looks up. Lookups read as whoever the
	// client is, so the caller passes one that impersonates the
	// release's owner: a chart must not read through the locker what its
	// owner may not.
	Client dynamic.Interface
	// Mapper maps the kinds lookups ask for to resources.
	Mapper meta.RESTMapper
}

// Output is a release rendered again.
type Output struct {
	// Manifest is what Helm would store as the release's manifest:
	// every document as "---\n# Source: <template>\n<document>\n", in
	// Helm's install order, without hooks or NOTES.txt. It can be
	// compared with a stored manifest as it is.
	Manifest string
	// Lookups are the reads the chart made, each once, in the order it
	// first made them.
	Lookups []Lookup
	// ReadsAPIVersions and ReadsKubeVersion say whether a template
	// mentions .Capabilities.APIVersions or .Capabilities.KubeVersion:
	// whether serving a new API, or upgrading the cluster, can change
	// what the chart renders.
	ReadsAPIVersions, ReadsKubeVersion bool
}

// NotRenderableError says a release's chart cannot be rendered from what
// Helm stored of it: Helm stores a release's chart without its
// dependencies (chart.Chart keeps them in an unexported field, which JSON
// leaves out), so a chart that uses templates of a library chart fails.
type NotRenderableError struct {
	// Chart is the chart's name-version.
	Chart string
	// Dependencies are the names Chart.yaml lists, none of them stored.
	Dependencies []string
	Err          error
}

func (e *NotRenderableError) Error() string {
	return fmt.Sprintf("chart %s cannot be rendered from its release, which Helm stores without its dependencies (%s): %v",
		e.Chart, strings.Join(e.Dependencies, ", "), e.Err)
}

func (e *NotRenderableError) Unwrap() error { return e.Err }

// Render renders rel's chart with its stored user values as
// `helm upgrade --reuse-values` of the same chart would on c, but with
// .Release as rel was rendered (its revision, IsInstall for revision 1,
// IsUpgrade after), so that a chart that templates them renders what Helm
// stored when nothing else changed. It is the code of the Helm that wrote
// rel throughout (Helm 3's SDK or Helm 4's, see Release): the values
// merge, the engine and the manifest sort are that Helm's, and only the
// lookups go through a client of the caller's. It does not modify rel.
//
// A lookup the client may not make is a *LookupError; a chart that fails
// and lists dependencies, a *NotRenderableError. Objects of a chart's
// dependencies are never rendered, since Helm did not store them.
// JSON-schema validation is skipped: it may fetch remote $refs, and the
// values were validated when the release was installed.
//
// A rollback stores the target's manifest, chart and values under a new
// revision number; it is rendered at the revision it rolled back to, which
// Helm's description of it names (see renderedAt). What Helm does not
// record cannot be rendered again: a post-renderer's edits.
func Render(ctx context.Context, rel *Release, c Cluster) (*Output, error) {
	if rel == nil || rel.sdk == nil {
		return nil, errors.New("release has no chart to render")
	}
	at := renderedAt(rel.Version, rel.description)
	run, err := rel.sdk.prepare(c, releaseOptions{
		Name:      rel.Name,
		Namespace: rel.Namespace,
		Revision:  at,
		IsInstall: at == 1,
		IsUpgrade: at > 1,
	})
	if err != nil {
		return nil, err
	}
	rec := newRecorder(ctx, c)
	files, err := run(rec)
	if err != nil || rec.failed != nil {
		return nil, renderError(rel, rec, err)
	}
	manifest, err := storedManifest(rel.sdk, files)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", rel.Chart, err)
	}
	return &Output{Manifest: manifest, Lookups: rec.lookups, ReadsAPIVersions: rel.readsAPIVersions, ReadsKubeVersion: rel.readsKubeVersion}, nil
}

// sdk is a revision decoded into one Helm's types, with that Helm's code
// for the steps of a render where Helm 3 and Helm 4 differ: the
// capabilities' types, the values merge, the engine and the manifest sort.
// Render does the rest alike for both.
type sdk interface {
	// prepare does what Helm's upgrade does before its engine runs, on
	// a copy of the chart: it checks the chart's kubeVersion against c,
	// reuses the stored values and processes dependencies (reuseValues,
	// ProcessDependencies), and builds the values templates see, with
	// .Release as o and .Capabilities from c. It returns the engine's
	// run over them, its lookups made through the recorder given.
	prepare(c Cluster, o releaseOptions) (runEngine, error)
	// sortManifests is Helm's releaseutil.SortManifests: hooks set
	// aside, the rest in install order.
	sortManifests(files map[string]string) ([]document, error)
}

// runEngine renders a prepared chart, its lookups made through rec.
type runEngine func(rec *recorder) (map[string]string, error)

// releaseOptions are what .Release says of a render: the fields of Helm's
// ReleaseOptions, which both SDKs declare alike.
type releaseOptions struct {
	Name, Namespace      string
	Revision             int
	IsInstall, IsUpgrade bool
}

// document is one rendered document of a manifest, and the template it
// came from.
type document struct{ source, content string }

// incompatibleError is Helm's refusal of a chart whose kubeVersion the
// cluster's version does not meet (action.Configuration.renderResources).
func incompatibleError(chart, constraint, kubeVersion string) error {
	return fmt.Errorf("chart %s requires kubeVersion: %s which is incompatible with Kubernetes %s", chart, constraint, kubeVersion)
}

// kubeVersionError says the cluster's version does not parse.
func kubeVersionError(kubeVersion string, err error) error {
	return fmt.Errorf("the cluster's Kubernetes version %q: %w", kubeVersion, err)
}

// renderError makes the engine's error one a caller can sort. Helm wraps
// a lookup's error in template errors that keep it, but the recorder's
// record is the word on whether a lookup failed.
func renderError(rel *Release, rec *recorder, err error) error {
	if rec.failed != nil {
		var le *LookupError
		if err == nil || !errors.As(err, &le) {
			return rec.failed
		}
		return fmt.Errorf("chart %s: %w", rel.Chart, err)
	}
	if len(rel.dependencies) > 0 {
		return &NotRenderableError{Chart: rel.Chart, Dependencies: slices.Clone(rel.dependencies), Err: err}
	}
	return fmt.Errorf("chart %s: %w", rel.Chart, err)
}

// storedManifest is the manifest Helm's action.Configuration.renderResources
// builds from the engine's files for a release, in both Helms: NOTES.txt
// taken out, hooks set aside, the rest sorted into install order by the
// SDK's SortManifests. Helm 3's trims each document there, Helm 4's only
// what comes before it.
func storedManifest(s sdk, files map[string]string) (string, error) {
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	docs, err := s.sortManifests(files)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.source, d.content)
	}
	return b.String(), nil
}

// renderedAt is the revision a manifest was rendered at: the revision's
// own, or for a rollback, the revision it rolled back to, which Helm (3
// and 4) describes as "Rollback to N".
func renderedAt(version int, description string) int {
	var to int
	if n, err := fmt.Sscanf(description, "Rollback to %d", &to); n == 1 && err == nil && to > 0 && to < version {
		return to
	}
	return version
}

// chartError names the chart in an error of Helm's.
func chartError(chart string, err error) error { return fmt.Errorf("chart %s: %w", chart, err) }

// reuseError is Helm's error when it cannot rebuild a release's values.
func reuseError(err error) error { return fmt.Errorf("rebuilding the release's values: %w", err) }

package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
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
// stored when nothing else changed. It is Helm's code throughout: the
// values merge, the engine and the manifest sort are Helm's, and only the
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
func Render(ctx context.Context, rel *release.Release, c Cluster) (*Output, error) {
	if rel == nil || rel.Chart == nil || rel.Chart.Metadata == nil {
		return nil, errors.New("release has no chart to render")
	}
	caps, err := capabilities(c)
	if err != nil {
		return nil, err
	}
	ch := copyChart(rel.Chart)
	name := ch.Metadata.Name + "-" + ch.Metadata.Version
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart %s requires kubeVersion: %s which is incompatible with Kubernetes %s", name, ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	values, err := reuseValues(ch, rel.Config)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", name, err)
	}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values, chartutil.ReleaseOptions{
		Name:      rel.Name,
		Namespace: rel.Namespace,
		Revision:  renderedAt(rel),
		IsInstall: renderedAt(rel) == 1,
		IsUpgrade: renderedAt(rel) > 1,
	}, caps, true)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", name, err)
	}

	rec := newRecorder(ctx, c)
	files, err := engine.RenderWithClientProvider(ch, top, rec)
	if err != nil || rec.failed != nil {
		return nil, renderError(rel.Chart.Metadata, name, rec, err)
	}
	manifest, err := storedManifest(files)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", name, err)
	}
	out := &Output{Manifest: manifest, Lookups: rec.lookups}
	for _, t := range ch.Templates {
		out.ReadsAPIVersions = out.ReadsAPIVersions || bytes.Contains(t.Data, []byte("Capabilities.APIVersions"))
		out.ReadsKubeVersion = out.ReadsKubeVersion || bytes.Contains(t.Data, []byte("Capabilities.KubeVersion"))
	}
	return out, nil
}

// capabilities is what Helm's action.Configuration.getCapabilities builds
// from discovery. Discovery gives Major and Minor apart from GitVersion;
// here they are GitVersion's, so a provider's "36+" minor reads "36".
func capabilities(c Cluster) (*chartutil.Capabilities, error) {
	kv, err := chartutil.ParseKubeVersion(c.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("the cluster's Kubernetes version %q: %w", c.KubeVersion, err)
	}
	return &chartutil.Capabilities{
		KubeVersion: chartutil.KubeVersion{Version: c.KubeVersion, Major: kv.Major, Minor: kv.Minor},
		APIVersions: chartutil.VersionSet(c.APIVersions),
		HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
	}, nil
}

// reuseValues is action.Upgrade's reuseValues with ReuseValues set and no
// new values given, followed by the dependency processing an upgrade does
// before it renders. It sets ch's values, so ch must be Render's copy.
func reuseValues(ch *chart.Chart, config map[string]any) (map[string]any, error) {
	old, err := chartutil.CoalesceValues(ch, config)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the release's values: %w", err)
	}
	values := chartutil.CoalesceTables(map[string]any{}, config)
	ch.Values = old
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		return nil, err
	}
	return values, nil
}

// renderError makes the engine's error one a caller can sort. Helm wraps
// a lookup's error in template errors that keep it, but the recorder's
// record is the word on whether a lookup failed.
func renderError(md *chart.Metadata, name string, rec *recorder, err error) error {
	if rec.failed != nil {
		var le *LookupError
		if err == nil || !errors.As(err, &le) {
			return rec.failed
		}
		return fmt.Errorf("chart %s: %w", name, err)
	}
	if len(md.Dependencies) > 0 {
		deps := make([]string, 0, len(md.Dependencies))
		for _, d := range md.Dependencies {
			if d != nil {
				deps = append(deps, d.Name)
			}
		}
		return &NotRenderableError{Chart: name, Dependencies: deps, Err: err}
	}
	return fmt.Errorf("chart %s: %w", name, err)
}

// storedManifest is the manifest Helm's action.Configuration.renderResources
// builds from the engine's files for a release: NOTES.txt taken out,
// hooks set aside, the rest sorted into install order.
func storedManifest(files map[string]string) (string, error) {
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	return b.String(), nil
}

// copyChart copies what rendering writes to: an upgrade that reuses values
// sets the chart's values, and dependency processing rewrites its
// dependency metadata (an alias becomes the name). Values need no copy:
// Helm's coalescing deep-copies the chart's and the user's values (with
// copystructure) before templates see them, so a template's `set` writes
// into a copy; TestRenderLeavesReleaseAlone holds Helm to it. Templates
// and files are only read, and are shared. The copy has no dependencies,
// as a stored chart has none: a release built in memory renders as its
// stored form would.
func copyChart(c *chart.Chart) *chart.Chart {
	cp := *c
	cp.SetDependencies()
	md := *c.Metadata
	if c.Metadata.Dependencies != nil {
		md.Dependencies = make([]*chart.Dependency, len(c.Metadata.Dependencies))
		for i, d := range c.Metadata.Dependencies {
			if d != nil {
				dep := *d
				md.Dependencies[i] = &dep
			}
		}
	}
	cp.Metadata = &md
	return &cp
}

// renderedAt is the revision rel's manifest was rendered at: its own, or
// for a rollback, the revision it rolled back to, which Helm (3 and 4)
// describes as "Rollback to N".
func renderedAt(rel *release.Release) int {
	if rel.Info != nil {
		var to int
		if n, err := fmt.Sscanf(rel.Info.Description, "Rollback to %d", &to); n == 1 && err == nil && to > 0 && to < rel.Version {
			return to
		}
	}
	return rel.Version
}

package render

import (
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// helm3 is a revision Helm 3 wrote, rendered with Helm 3's SDK: its
// stored chart, or the chart of its source (see Release.WithChart).
type helm3 struct {
	rel    *release.Release
	source []chartFile
}

var _ sdk = helm3{}

func (h helm3) prepare(c Cluster, o releaseOptions) (runEngine, error) {
	caps, err := capabilitiesV3(c)
	if err != nil {
		return nil, err
	}
	ch, err := h.chart()
	if err != nil {
		return nil, err
	}
	name := ch.Metadata.Name + "-" + ch.Metadata.Version
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, incompatibleError(name, ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	values, err := reuseValuesV3(ch, h.rel.Config)
	if err != nil {
		return nil, chartError(name, err)
	}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values, chartutil.ReleaseOptions{
		Name:      o.Name,
		Namespace: o.Namespace,
		Revision:  o.Revision,
		IsInstall: o.IsInstall,
		IsUpgrade: o.IsUpgrade,
	}, caps, true)
	if err != nil {
		return nil, chartError(name, err)
	}
	return func(rec *recorder) (map[string]string, error) {
		return engine.RenderWithClientProvider(ch, top, rec)
	}, nil
}

// chart is a copy of the chart to render, for prepare to change: the
// stored chart's, or the source's loaded afresh, dependencies and all.
func (h helm3) chart() (*chart.Chart, error) {
	if h.source == nil {
		return copyChartV3(h.rel.Chart), nil
	}
	ch, err := loadV3(h.source)
	if err != nil {
		return nil, &InvalidChartError{Err: err}
	}
	return ch, nil
}

func (helm3) sortManifests(files map[string]string) ([]document, error) {
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	docs := make([]document, len(manifests))
	for i, m := range manifests {
		docs[i] = document{source: m.Name, content: m.Content}
	}
	return docs, nil
}

// capabilitiesV3 is what Helm 3's action.Configuration.getCapabilities
// builds from discovery. Discovery gives Major and Minor apart from
// GitVersion; here they are GitVersion's, so a provider's "36+" minor
// reads "36".
func capabilitiesV3(c Cluster) (*chartutil.Capabilities, error) {
	kv, err := chartutil.ParseKubeVersion(c.KubeVersion)
	if err != nil {
		return nil, kubeVersionError(c.KubeVersion, err)
	}
	return &chartutil.Capabilities{
		KubeVersion: chartutil.KubeVersion{Version: c.KubeVersion, Major: kv.Major, Minor: kv.Minor},
		APIVersions: chartutil.VersionSet(c.APIVersions),
		HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
	}, nil
}

// reuseValuesV3 is Helm 3's action.Upgrade.reuseValues with ReuseValues
// set and no new values given, followed by the dependency processing an
// upgrade does before it renders. It sets ch's values, so ch must be
// prepare's copy.
func reuseValuesV3(ch *chart.Chart, config map[string]any) (map[string]any, error) {
	old, err := chartutil.CoalesceValues(ch, config)
	if err != nil {
		return nil, reuseError(err)
	}
	values := chartutil.CoalesceTables(map[string]any{}, config)
	ch.Values = old
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		return nil, err
	}
	return values, nil
}

// copyChartV3 copies what rendering writes to: an upgrade that reuses
// values sets the chart's values, and dependency processing rewrites its
// dependency metadata (an alias becomes the name). Values need no copy:
// Helm's coalescing deep-copies the chart's and the user's values (with
// copystructure) before templates see them, so a template's `set` writes
// into a copy; TestRenderLeavesReleaseAlone holds Helm to it. Templates
// and files are only read, and are shared. The copy has no dependencies,
// as a stored chart has none: a release built in memory renders as its
// stored form would.
func copyChartV3(c *chart.Chart) *chart.Chart {
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

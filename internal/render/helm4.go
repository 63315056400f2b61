package render

import (
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// helm4 is a revision Helm 4 wrote, rendered with Helm 4's SDK: the steps
// of helm3's, each with Helm 4's own code (pkg/action's prepareUpgrade,
// reuseValues and renderResources), imported under the names pkg/action
// gives them.
type helm4 struct {
	rel    *release.Release
	source []chartFile
}

var _ sdk = helm4{}

func (h helm4) prepare(c Cluster, o releaseOptions) (runEngine, error) {
	caps, err := capabilitiesV4(c)
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
	values, err := reuseValuesV4(ch, h.rel.Config)
	if err != nil {
		return nil, chartError(name, err)
	}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, values, common.ReleaseOptions{
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

// chart is helm3.chart's, for Helm 4's types.
func (h helm4) chart() (*chart.Chart, error) {
	if h.source == nil {
		return copyChartV4(h.rel.Chart), nil
	}
	ch, err := loadV4(h.source)
	if err != nil {
		return nil, &InvalidChartError{Err: err}
	}
	return ch, nil
}

func (helm4) sortManifests(files map[string]string) ([]document, error) {
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

// capabilitiesV4 is what Helm 4's action.Configuration.getCapabilities
// builds from discovery, with Major and Minor GitVersion's, as
// capabilitiesV3's. Like getCapabilities, it leaves the KubeVersion's
// normalized form unset, so its String() is GitVersion, as Helm 4 checks a
// chart's kubeVersion against it.
func capabilitiesV4(c Cluster) (*common.Capabilities, error) {
	kv, err := common.ParseKubeVersion(c.KubeVersion)
	if err != nil {
		return nil, kubeVersionError(c.KubeVersion, err)
	}
	return &common.Capabilities{
		KubeVersion: common.KubeVersion{Version: c.KubeVersion, Major: kv.Major, Minor: kv.Minor},
		APIVersions: common.VersionSet(c.APIVersions),
		HelmVersion: common.DefaultCapabilities.HelmVersion,
	}, nil
}

// reuseValuesV4 is Helm 4's action.Upgrade.reuseValues with ReuseValues
// set and no new values given, followed by the dependency processing
// prepareUpgrade does before it renders. It sets ch's values, so ch must
// be prepare's copy.
func reuseValuesV4(ch *chart.Chart, config map[string]any) (map[string]any, error) {
	old, err := util.CoalesceValues(ch, config)
	if err != nil {
		return nil, reuseError(err)
	}
	values := util.CoalesceTables(map[string]any{}, config)
	ch.Values = old
	if err := chartutil.ProcessDependencies(ch, values); err != nil {
		return nil, err
	}
	return values, nil
}

// copyChartV4 is copyChartV3 for Helm 4's chart type, which has the same
// fields.
func copyChartV4(c *chart.Chart) *chart.Chart {
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

package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// checkChartComplete refuses a release whose stored chart lacks what
// rendered it. Helm stores a release's chart without its subcharts:
// chart.Chart keeps them in an unexported field, which encoding/json
// skips, and Helm never renders a stored chart again (rollback reuses the
// stored manifest). Rendered again, a chart with subcharts would lose
// their objects from the manifest, and the upgrade would delete them, or
// fail on a library chart's missing templates. Such a chart declares its
// dependencies in Chart.yaml (requirements.yaml for apiVersion v1), and the
// manifest names, in Helm's "# Source:" comments, templates the stored
// chart does not hold. A release src renders from its chart's source
// (render.Release.WithChart) has its dependencies: it is refused only for
// a template the source lacks.
func checkChartComplete(rel *release.Release, src *render.Release) error {
	ch := rel.Chart
	var held map[string]bool
	if templates := sourceTemplates(src); templates != nil {
		held = make(map[string]bool, len(templates))
		for _, t := range templates {
			held[t] = true
		}
	} else {
		if deps := ch.Metadata.Dependencies; len(deps) > 0 {
			names := make([]string, 0, len(deps))
			for _, d := range deps {
				names = append(names, d.Name)
			}
			return fmt.Errorf("%w: chart %s depends on %s, and Helm stores a release's chart without its subcharts (name the chart's source in spec.chartRef)", ErrIncompleteChart, ch.Metadata.Name, strings.Join(names, ", "))
		}
		held = make(map[string]bool, len(ch.Templates))
		for _, t := range ch.Templates {
			held[ch.Metadata.Name+"/"+t.Name] = true
		}
	}
	sources := manifestSources(rel.Manifest)
	for _, h := range rel.Hooks {
		sources = append(sources, h.Path)
	}
	for _, s := range sources {
		if !held[s] {
			return fmt.Errorf("%w: the release holds output of %s, which its chart %s has no template for", ErrIncompleteChart, s, ch.Metadata.Name)
		}
	}
	return nil
}

// sourceTemplates are the templates of src's chart source, nil for none.
func sourceTemplates(src *render.Release) []string {
	if src == nil {
		return nil
	}
	return src.SourceTemplates()
}

// manifestSources returns the template paths of Helm's "# Source:"
// comments, one at the top of each rendered document.
func manifestSources(manifest string) []string {
	var sources []string
	for line := range strings.Lines(manifest) {
		if s, ok := strings.CutPrefix(line, "# Source: "); ok {
			sources = append(sources, strings.TrimSpace(s))
		}
	}
	return sources
}

// storedApplyMethod reads the release's latest revision through Helm 4's
// storage driver, which keeps the apply method Helm 3's types drop, checks
// that it is rel, and returns the apply method it records: none for a
// revision Helm 3 wrote, "ssa" or "csa" for one Helm 4 wrote.
//
// Helm's upgrade action upgrades the latest revision in storage, not the
// one it is given: a revision written since rel was verified would be
// upgraded unverified, so it is refused. The window between this read and
// Helm's own is Helm's; a concurrent Helm fails on the pending revision or
// on the Secret that already exists.
func storedApplyMethod(cfg *actionv4.Configuration, rel *release.Release) (string, error) {
	last, err := cfg.Releases.Last(rel.Name)
	if err != nil {
		return "", fmt.Errorf("reading the latest revision: %w", err)
	}
	stored, ok := last.(*releasev4.Release)
	if !ok {
		return "", fmt.Errorf("reading the latest revision: Helm's storage returned a %T", last)
	}
	if stored.Version != rel.Version {
		return "", fmt.Errorf("%w: revision %d is the latest", ErrReleaseChanged, stored.Version)
	}
	if stored.Manifest != rel.Manifest {
		return "", fmt.Errorf("%w: revision %d's manifest differs from the one given", ErrReleaseChanged, stored.Version)
	}
	// Helm reuses the stored values, not rel's.
	same, err := sameValues(rel.Config, stored.Config)
	if err != nil {
		return "", err
	}
	if !same {
		return "", fmt.Errorf("%w: revision %d's values differ from the ones given", ErrReleaseChanged, stored.Version)
	}
	return stored.ApplyMethod, nil
}

// sameValues reports whether two sets of values decoded from JSON are
// equal. encoding/json sorts map keys, so equal values encode equal; no
// values may be stored as null or {}.
func sameValues(a, b map[string]any) (bool, error) {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b), nil
	}
	ja, err := json.Marshal(a)
	if err != nil {
		return false, fmt.Errorf("encoding the release's values: %w", err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, fmt.Errorf("encoding the stored values: %w", err)
	}
	return bytes.Equal(ja, jb), nil
}

// checkStoredChart refuses rel when the Secret of its revision no longer
// holds the chart and values rel was decoded with, read through kube: a Secret
// writer may have rewritten them since they were verified, and Helm's
// upgrade reads the stored values (--reuse-values) itself. Helm's own read
// follows at once; the window between the two is Helm's.
func checkStoredChart(ctx context.Context, kube kubernetes.Interface, rel *render.Release) error {
	secret, err := kube.CoreV1().Secrets(rel.Namespace).Get(ctx, storage.SecretName(rel.Name, rel.Version), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading revision %d: %w", rel.Version, err)
	}
	stored, err := storage.Read(secret, rel.Namespace, rel.Name)
	if err != nil {
		return err
	}
	if stored.ChartDigest() != rel.ChartDigest() {
		return fmt.Errorf("%w: revision %d's chart or values were rewritten since they were read", ErrReleaseChanged, rel.Version)
	}
	return nil
}

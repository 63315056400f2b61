package upgrade

import (
	"context"
	"encoding/json"
	"fmt"

	actionv3 "helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/internal/render"
)

// newHelm3Config returns Helm 3's action configuration over getter, with
// release storage in Secrets of namespace. It does no I/O.
func newHelm3Config(getter *clientGetter, namespace string) (*actionv3.Configuration, error) {
	cfg := new(actionv3.Configuration)
	// Helm 3's actions log through this function alone; a library does
	// not log, and the caller reports the error returned.
	if err := cfg.Init(getter, namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, err
	}
	return cfg, nil
}

// upgradeHelm3 upgrades rel, a revision Helm 3 wrote, with Helm 3's
// upgrade action, as `helm upgrade --reuse-values` of Helm 3 does: its
// engine renders, and a client-side three-way strategic merge applies,
// written as manager "helm" with operation Update. A revision that fails
// once stored is rolled back (rollBackFailed). The chart is rel's stored
// chart, or src's source (see render.Release.WithChart) with its
// dependencies.
func upgradeHelm3(ctx context.Context, cfg *actionv3.Configuration, rel *release.Release, src *render.Release, opts Options) (*release.Release, error) {
	ch, err := copyChart[chart.Chart](rel.Chart)
	if src != nil && err == nil {
		if fromSource, srcErr := src.SourceChartV3(); srcErr != nil || fromSource != nil {
			ch, err = fromSource, srcErr
		}
	}
	if err != nil {
		return nil, err
	}
	u := actionv3.NewUpgrade(cfg)
	u.Namespace = rel.Namespace
	u.ReuseValues = true
	u.DryRunOption = "none" // the CLI's value when --dry-run is not given
	u.MaxHistory = opts.historyMax()
	u.Timeout = opts.timeout()
	next, err := u.RunWithContext(ctx, rel.Name, ch, map[string]any{})
	if err != nil {
		return nil, rollBackFailed(helm3Rollback{cfg: cfg, opts: opts}, rel, err)
	}
	return next, nil
}

// copyChart returns a deep copy of ch as chart type T of either SDK, which
// both encode as Helm stores them. Helm's upgrade sets the chart's values
// to the release's (reuseValues), so it gets a copy, not the caller's.
func copyChart[T any](ch *chart.Chart) (*T, error) {
	raw, err := json.Marshal(ch)
	if err != nil {
		return nil, fmt.Errorf("copying the stored chart: %w", err)
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("copying the stored chart: %w", err)
	}
	return out, nil
}

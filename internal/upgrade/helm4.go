package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	"helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"

	"github.com/helm-locker/helm-locker/internal/render"
)

// newHelm4Config returns Helm 4's action configuration over getter, with
// release storage in Secrets of namespace. It does no I/O.
func newHelm4Config(getter *clientGetter, namespace string) (*actionv4.Configuration, error) {
	// A library does not log: Helm 4's actions, storage and kube client
	// log through this handler. (A few of pkg/kube's messages go to
	// slog's default logger whatever the configuration says.)
	cfg := actionv4.NewConfiguration(actionv4.ConfigurationSetLogger(slog.DiscardHandler))
	if err := cfg.Init(getter, namespace, "secret"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// upgradeHelm4 upgrades rel, a revision Helm 4 wrote with apply method
// method, with Helm 4's upgrade action, as `helm upgrade --reuse-values`
// of Helm 4 does: its engine renders, and --server-side=auto applies as
// the revision was applied. For "ssa" it applies server-side, as manager
// "helm" with operation Apply, without forcing conflicts; for "csa" (or
// any other method) client-side, a three-way merge written as manager
// "helm" with operation Update. It records the same apply method in the
// new revision. A revision that fails once stored is rolled back
// (rollBackFailed).
//
// ServerSideApply is set to what "auto" makes of method (pkg/action
// getUpgradeServerSideValue: server-side for "ssa" alone), not to "auto":
// method is what was checked against rel, and a revision rewritten
// between that check and Helm's own read cannot switch the apply.
//
// Helm 3's SDK cannot stand in for it. Its engine renders some charts
// otherwise (see internal/render.Release), so N+1 would not be the render
// that decided on the upgrade. And seen against kube-apiserver v1.36 with
// a release the Helm 4.3.1 CLI installed server-side: Helm 3's upgrade
// wrote revision 2 without apply_method, rewrote revision 1 without it as
// it marked it superseded (its types have no such field), and left the
// changed fields with a "helm" Update entry beside the install's "helm"
// Apply. The next `helm upgrade` of Helm 4 (--server-side=auto) then
// succeeded client-side and stored apply_method "csa": the release had
// silently left server-side apply. e2e TestUpgradeThroughSDK holds the
// server-side path to keeping it.
func upgradeHelm4(ctx context.Context, cfg *actionv4.Configuration, rel *release.Release, src *render.Release, method string, opts Options) (*release.Release, error) {
	ch, err := copyChart[chartv2.Chart](rel.Chart)
	if src != nil && err == nil {
		if fromSource, srcErr := src.SourceChartV4(); srcErr != nil || fromSource != nil {
			ch, err = fromSource, srcErr
		}
	}
	if err != nil {
		return nil, err
	}
	u := actionv4.NewUpgrade(cfg)
	u.ServerSideApply = strconv.FormatBool(method == string(releasev4.ApplyMethodServerSideApply))
	u.Namespace = rel.Namespace
	u.ReuseValues = true
	u.WaitStrategy = kubev4.HookOnlyStrategy // the CLI's value when --wait is not given
	u.MaxHistory = opts.historyMax()
	u.Timeout = opts.timeout()
	next, err := u.RunWithContext(ctx, rel.Name, ch, map[string]any{})
	if err != nil {
		return nil, rollBackFailed(helm4Rollback{cfg: cfg, opts: opts}, rel, err)
	}
	return toV3(next)
}

// toV3 converts a release of Helm 4's types to Helm 3's, through the JSON
// both store.
func toV3(r any) (*release.Release, error) {
	next, ok := r.(*releasev4.Release)
	if !ok {
		return nil, fmt.Errorf("helm's upgrade returned a %T", r)
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("encoding the new revision: %w", err)
	}
	var out release.Release
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("decoding the new revision: %w", err)
	}
	return &out, nil
}

package upgrade

import (
	"context"
	"errors"
	"fmt"
	"time"

	actionv3 "helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// Defaults of Options, those of `helm upgrade`.
const (
	// DefaultMaxHistory is `helm upgrade --history-max`'s default
	// (HELM_MAX_HISTORY unset).
	DefaultMaxHistory = 10
	// DefaultTimeout is `helm upgrade --timeout`'s default.
	DefaultTimeout = 5 * time.Minute
)

// Options tunes an upgrade as `helm upgrade`'s flags do. The zero value
// gives DefaultOptions.
type Options struct {
	// MaxHistory is how many revisions of the release Helm keeps, as
	// --history-max: 0 means DefaultMaxHistory, and a negative number no
	// limit (--history-max 0).
	MaxHistory int
	// Timeout bounds each Kubernetes operation Helm waits for, such as a
	// hook's Job, as --timeout; 0 or less means DefaultTimeout.
	Timeout time.Duration
}

// DefaultOptions returns the options `helm upgrade` has when given no
// flags.
func DefaultOptions() Options {
	return Options{MaxHistory: DefaultMaxHistory, Timeout: DefaultTimeout}
}

// historyMax is MaxHistory as Helm's actions take it: 0 for no limit.
func (o Options) historyMax() int {
	switch {
	case o.MaxHistory == 0:
		return DefaultMaxHistory
	case o.MaxHistory < 0:
		return 0
	default:
		return o.MaxHistory
	}
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

// Errors Upgrade returns before Helm is called, each wrapped with the
// release's identity; test them with errors.Is. Helm's own errors, such as
// a Forbidden from the API server, are returned wrapped as they are.
var (
	// ErrInvalidRelease is a release without a name, a namespace or a
	// chart.
	ErrInvalidRelease = errors.New("not a release Upgrade can upgrade")
	// ErrIncompleteChart is a release whose stored chart lacks templates
	// that rendered it, which an upgrade would delete (see
	// checkChartComplete).
	ErrIncompleteChart = errors.New("the stored chart lacks what rendered the release")
	// ErrReleaseChanged is a release whose latest revision in storage is
	// not the one given: Helm upgrades the latest, which nobody verified.
	ErrReleaseChanged = errors.New("the release's latest stored revision is not the one given")
	// ErrFieldManager means this process set Helm's field manager to
	// another name than "helm" (see useHelmFieldManager).
	ErrFieldManager = errors.New("helm's field manager is not \"helm\"")
)

// Upgrade upgrades release rel (the latest verified revision, as
// render.Decode read it against what its lock verified: a chart a Secret
// writer forged is never upgraded with) to revision N+1 with its own
// stored chart and user-supplied values, through Helm's SDK, writing with cfg (a rest.Config
// that already impersonates the release's write identity). Helm writes N+1
// as it writes any upgrade: pending-upgrade, then deployed, history limited
// to MaxHistory (default 10, as --history-max).
//
// It is `helm upgrade --reuse-values` with the chart the release was
// installed from, made as the CLI that wrote the revision would, so that
// it renders N+1 with the engine that rendered N: with Helm 3's SDK
// (client-side apply) for a revision Helm 3 wrote (no apply method
// stored), and with Helm 4's for one Helm 4 wrote, applied as N was
// ("ssa": server-side; "csa": client-side), the apply method kept in N+1.
// Which Helm wrote N is storage.Release.Helm's rule, read from the stored
// revision, and checked against rel.Helm; the stored revision must still
// hold rel's chart and values (rel.ChartDigest), or the upgrade is refused
// with ErrReleaseChanged before Helm is called. Every read and write, the
// storage's, the render's `lookup`s and discovery included, goes through
// cfg; Helm writes as field manager "helm". The release returned is N+1 as
// Helm's v3 types hold it, without the apply method, which only its Secret
// records.
//
// An upgrade that fails after Helm stored N+1 leaves N+1 failed, which
// would leave the release unlocked; Upgrade then rolls it back to N with
// the same SDK's rollback, without waiting, and the error it returns wraps
// Helm's upgrade error (errors.Is finds it) and says how the rollback went:
// "...; rolled back to revision N as revision N+2", or "...; rolling back
// failed too: ...". A failure before N+1 was stored is not rolled back.
// Helm 4's rollback of a release applied server-side applies every object
// of N, so an object the identity may not write fails it too, and leaves
// N+2 failed.
func Upgrade(ctx context.Context, cfg *rest.Config, rel *render.Release, opts Options) (*release.Release, error) {
	if rel == nil {
		return nil, fmt.Errorf("%w: nil", ErrInvalidRelease)
	}
	given, err := rel.AsHelm3()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRelease, err)
	}
	if err := checkRelease(given); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("upgrading release %s/%s from revision %d", given.Namespace, given.Name, given.Version)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if err := checkStoredChart(ctx, kube, rel); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return upgradeRelease(ctx, cfg, given, rel, opts)
}

// upgradeRelease is Upgrade of rel, as src decoded it, once the caller
// checked that its Secret holds the chart and values it was given.
func upgradeRelease(ctx context.Context, cfg *rest.Config, rel *release.Release, src *render.Release, opts Options) (*release.Release, error) {
	prefix := fmt.Sprintf("upgrading release %s/%s from revision %d", rel.Namespace, rel.Name, rel.Version)
	if err := checkChartComplete(rel, src); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if err := useHelmFieldManager(); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	getter := newClientGetter(cfg, rel.Namespace)
	helm3, err := newHelm3Config(getter, rel.Namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	helm4, err := newHelm4Config(getter, rel.Namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	next, err := upgradeAsWritten(ctx, helm3, helm4, rel, src.Helm, src, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return next, nil
}

// upgradeAsWritten upgrades rel with the SDK of the Helm that wrote it, as
// the stored revision says, over that SDK's configuration: helm3's or
// helm4's, which reach the same release storage. Helm 4's storage is read
// first, since its types keep the apply method. given, if not zero, is
// the Helm the caller read rel as; src, if not nil, is rel as render
// decoded it, whose chart's source, if it has one, is the chart upgraded
// with.
func upgradeAsWritten(ctx context.Context, helm3 *actionv3.Configuration, helm4 *actionv4.Configuration, rel *release.Release, given manifest.Helm, src *render.Release, opts Options) (*release.Release, error) {
	method, err := storedApplyMethod(helm4, rel)
	if err != nil {
		return nil, err
	}
	// The rule the lock and the render read revisions by.
	h := (&storage.Release{ApplyMethod: method}).Helm()
	if given != 0 && given != h {
		return nil, fmt.Errorf("%w: %s wrote revision %d, not %s", ErrReleaseChanged, h, rel.Version, given)
	}
	if h == manifest.Helm3 {
		return upgradeHelm3(ctx, helm3, rel, src, opts)
	}
	return upgradeHelm4(ctx, helm4, rel, src, method, opts)
}

func checkRelease(rel *release.Release) error {
	switch {
	case rel == nil:
		return fmt.Errorf("%w: nil", ErrInvalidRelease)
	case rel.Name == "" || rel.Namespace == "":
		return fmt.Errorf("%w: release %q in namespace %q", ErrInvalidRelease, rel.Name, rel.Namespace)
	case rel.Chart == nil || rel.Chart.Metadata == nil:
		return fmt.Errorf("%w: release %s/%s revision %d has no chart; decode the whole release", ErrInvalidRelease, rel.Namespace, rel.Name, rel.Version)
	}
	return nil
}

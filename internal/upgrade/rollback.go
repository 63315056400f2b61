package upgrade

import (
	"fmt"

	actionv3 "helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
)

// rollbackAction is one SDK's release storage and rollback action, over
// the same Helm configuration its upgrade ran with.
type rollbackAction interface {
	// latest returns the version and status of the release's latest
	// stored revision.
	latest(name string) (version int, status release.Status, err error)
	// rollBack rolls release name back to revision version with Helm's
	// rollback action, which stores the result as the latest revision
	// plus one.
	rollBack(name string, version int) error
}

var (
	_ rollbackAction = helm3Rollback{}
	_ rollbackAction = helm4Rollback{}
)

// rollBackFailed is what Upgrade does when Helm's upgrade of rel failed:
// if Helm stored revision N+1 and marked it failed, it rolls the release
// back to rel (revision N), as `helm upgrade --atomic` (Helm 4:
// --rollback-on-failure) does, and returns upgradeErr, wrapped, with what
// became of the release.
//
// The locker holds a release only while its latest revision is deployed:
// a failed N+1 would leave it unlocked, with some of N+1's objects written
// and the rest not. Rolled back, the latest revision (N+2) is deployed
// with N's manifest, and the lock holds it again. Storage decides, not the
// error: a failure before Helm stored N+1 (a Forbidden on the Secret, a
// failed render) changed nothing, and N is still the latest and deployed.
// A latest revision other than N+1 failed is someone else's: a
// pending-upgrade N+1 may be an upgrade still running, and is not rolled
// back.
//
// It rolls back even when the upgrade failed because ctx is done: the
// caller is going away, and no one else would. (Helm's upgrade goroutine
// may still be applying N+1's objects then; whatever it writes, the lock
// holds N+2's manifest.)
//
// The rollback is `helm rollback` to N without --wait. The upgrade does
// not use --atomic or --rollback-on-failure themselves: both make the
// upgrade and its rollback wait for every object to be ready (v3
// upgrade.go: u.Wait = u.Wait || u.Atomic; v4 turns hookOnly into the
// watcher), which Upgrade never does; their rollback drops the history
// limit (it leaves MaxHistory 0); and it goes back to the latest deployed
// or superseded revision, not necessarily N. Hooks run, as with both.
func rollBackFailed(actions rollbackAction, rel *release.Release, upgradeErr error) error {
	version, status, err := actions.latest(rel.Name)
	if err != nil {
		return fmt.Errorf("%w; reading the latest revision to roll back failed too: %w", upgradeErr, err)
	}
	failed := rel.Version + 1
	if version != failed || status != release.StatusFailed {
		return upgradeErr
	}
	if err := actions.rollBack(rel.Name, rel.Version); err != nil {
		return fmt.Errorf("%w; rolling back failed too: %w", upgradeErr, err)
	}
	// Helm's rollback stores the latest revision plus one (prepareRollback
	// in both SDKs).
	return fmt.Errorf("%w; rolled back to revision %d as revision %d", upgradeErr, rel.Version, failed+1)
}

// helm3Rollback is Helm 3's rollback, for a revision Helm 3 wrote.
// An object whose three-way patch from N+1's manifest to N's is empty is
// not written, so an object the identity may not write, and the upgrade
// therefore left as it was, does not fail the rollback too.
type helm3Rollback struct {
	cfg  *actionv3.Configuration
	opts Options
}

func (h helm3Rollback) latest(name string) (int, release.Status, error) {
	last, err := h.cfg.Releases.Last(name)
	if err != nil {
		return 0, "", err
	}
	return last.Version, last.Info.Status, nil
}

func (h helm3Rollback) rollBack(name string, version int) error {
	r := actionv3.NewRollback(h.cfg)
	r.Version = version
	r.MaxHistory = h.opts.historyMax()
	r.Timeout = h.opts.timeout()
	return r.Run(name)
}

// helm4Rollback is Helm 4's rollback, for a revision Helm 4 wrote:
// --server-side=auto applies N's objects as N was applied, and keeps its
// apply method. Server-side, it applies every object, changed or not, so
// one the identity may not write fails the rollback too.
type helm4Rollback struct {
	cfg  *actionv4.Configuration
	opts Options
}

func (h helm4Rollback) latest(name string) (int, release.Status, error) {
	last, err := h.cfg.Releases.Last(name)
	if err != nil {
		return 0, "", err
	}
	rel, ok := last.(*releasev4.Release)
	if !ok {
		return 0, "", fmt.Errorf("helm's storage returned a %T", last)
	}
	return rel.Version, release.Status(rel.Info.Status), nil
}

func (h helm4Rollback) rollBack(name string, version int) error {
	r := actionv4.NewRollback(h.cfg) // ServerSideApply "auto", as the CLI
	r.Version = version
	r.WaitStrategy = kubev4.HookOnlyStrategy // the CLI's value when --wait is not given
	r.MaxHistory = h.opts.historyMax()
	r.Timeout = h.opts.timeout()
	return r.Run(name)
}

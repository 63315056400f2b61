package storage

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// Decision is what a release's status in Helm's storage means for its lock.
type Decision struct {
	// Engage is true when the revision must be held.
	Engage bool
	// State is the HelmRelease state to report. For an engaged revision it
	// is Deployed, which is reported only once the lock holds.
	State v1alpha1.State
	// Reason is a CamelCase word for the Locked condition when the lock is
	// open.
	Reason string
	// Message explains the reason to a person.
	Message string
	// Forget says the open lock lets go of the release's objects, so that
	// another lock that declares one of them takes it over: Helm
	// uninstalled the release. Any other open lock keeps them (see
	// engine.Engine.Pause), since Helm is changing them or is expected
	// to: after a failed revision, a retried upgrade or a rollback
	// follows, and a lock that had taken an object over would fight it.
	Forget bool
}

// Decide maps the status label of a release's latest revision to the
// lock's action. Only deployed revisions are held: while Helm works on a
// release the lock opens so Helm is never fought, and a failed, superseded
// or uninstalled revision's manifest is never re-applied.
func Decide(status string) Decision {
	switch s := release.Status(status); s {
	case release.StatusDeployed:
		return Decision{Engage: true, State: v1alpha1.StateDeployed, Reason: v1alpha1.ReasonLocked}
	case release.StatusPendingInstall, release.StatusPendingUpgrade, release.StatusPendingRollback, release.StatusUninstalling:
		return Decision{State: v1alpha1.StateTransitioning, Reason: ReasonHelmWorking,
			Message: fmt.Sprintf("Helm is working on the release (%s); the lock opens until it is deployed again", s)}
	case release.StatusFailed:
		return Decision{State: v1alpha1.StateFailed, Reason: v1alpha1.ReasonReleaseFailed,
			Message: "the latest revision failed; its manifest is not held"}
	case release.StatusUninstalled:
		return Decision{State: v1alpha1.StateUninstalled, Reason: v1alpha1.ReasonReleaseUninstalled,
			Message: "the release was uninstalled (its history was kept); nothing is held", Forget: true}
	case release.StatusSuperseded:
		return Decision{State: v1alpha1.StateUnknown, Reason: v1alpha1.ReasonReleaseSuperseded,
			Message: "the latest revision is marked superseded, which Helm does not leave behind normally; nothing is held"}
	default:
		return Decision{State: v1alpha1.StateUnknown, Reason: v1alpha1.ReasonUnknownReleaseStatus,
			Message: fmt.Sprintf("the latest revision has status %q; nothing is held", s)}
	}
}

// ReasonHelmWorking is the Decision reason while Helm works on a release.
const ReasonHelmWorking = v1alpha1.ReasonHelmOperationInProgress

// LastWrite is when a release Secret was last written: its creation, or
// the latest write its managedFields record, such as Helm marking it
// uninstalling. The times have a resolution of one second.
func LastWrite(obj metav1.Object) time.Time {
	last := obj.GetCreationTimestamp().Time
	for _, f := range obj.GetManagedFields() {
		if f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	return last
}

// Deployed reports whether status is the one of a revision Helm finished
// applying.
func Deployed(status string) bool { return release.Status(status) == release.StatusDeployed }

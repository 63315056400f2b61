package lock

import (
	"fmt"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// Phase is where a release's lock stands.
type Phase string

// The phases. A lock goes Unlocked → Reconciling when a deployed revision is
// engaged, Reconciling → Locked once every object of that revision has been
// checked and is as declared, Locked → Reconciling when an object drifts and
// cannot be corrected at once, and back to Unlocked whenever Helm works on
// the release or the release stops being deployed.
const (
	Unlocked    Phase = "Unlocked"
	Reconciling Phase = "Reconciling"
	Locked      Phase = "Locked"
)

// EventType is what happened to a release or its objects.
type EventType int

// The events that move a lock.
const (
	// Engage: the release's latest revision is deployed; hold it.
	Engage EventType = iota
	// Settle: every object of the revision was checked and is as declared.
	Settle
	// Drift: an object is not as declared after a check.
	Drift
	// Open: Helm is working on the release, or it is no longer deployed,
	// or no one asks for the lock any more.
	Open
)

// Event is one input to the state machine. Revision is meaningful for
// Engage and Settle.
type Event struct {
	Type     EventType
	Revision int
}

// Lock is one release's lock state. The zero value is Unlocked.
type Lock struct {
	Phase Phase
	// Revision is the release revision held; 0 when Unlocked.
	Revision int
}

// Next returns the lock after ev. It is a pure function, so every transition
// can be tested on its own.
func (l Lock) Next(ev Event) Lock {
	if l.Phase == "" {
		l.Phase = Unlocked
	}
	switch ev.Type {
	case Open:
		return Lock{Phase: Unlocked}
	case Engage:
		if l.Phase != Unlocked && l.Revision == ev.Revision {
			return l
		}
		return Lock{Phase: Reconciling, Revision: ev.Revision}
	case Settle:
		if l.Phase == Reconciling && l.Revision == ev.Revision {
			return Lock{Phase: Locked, Revision: l.Revision}
		}
	case Drift:
		if l.Phase == Locked {
			return Lock{Phase: Reconciling, Revision: l.Revision}
		}
	}
	return l
}

// Decision is what a release's status in Helm's storage means for its lock.
type Decision struct {
	// Engage is true when the revision must be held.
	Engage bool
	// State is the HelmRelease state to report. For an engaged revision it
	// is Deployed, which is reported only once the lock is Locked.
	State v1alpha1.State
	// Reason is a CamelCase word for the Locked condition when the lock is
	// open.
	Reason string
	// Message explains the reason to a person.
	Message string
}

// Decide maps the status of a release's latest revision to the lock's
// action. Only deployed revisions are held: while Helm works on a release
// the lock opens so Helm is never fought, and a failed, superseded or
// uninstalled revision's manifest is never re-applied.
func Decide(status release.Status) Decision {
	switch status {
	case release.StatusDeployed:
		return Decision{Engage: true, State: v1alpha1.StateDeployed, Reason: "Locked"}
	case release.StatusPendingInstall, release.StatusPendingUpgrade, release.StatusPendingRollback, release.StatusUninstalling:
		return Decision{State: v1alpha1.StateTransitioning, Reason: "HelmOperationInProgress",
			Message: fmt.Sprintf("Helm is working on the release (%s); the lock opens until it is deployed again", status)}
	case release.StatusFailed:
		return Decision{State: v1alpha1.StateFailed, Reason: "ReleaseFailed",
			Message: "the latest revision failed; its manifest is not held"}
	case release.StatusUninstalled:
		return Decision{State: v1alpha1.StateUninstalled, Reason: "ReleaseUninstalled",
			Message: "the release was uninstalled (its history was kept); nothing is held"}
	case release.StatusSuperseded:
		return Decision{State: v1alpha1.StateUnknown, Reason: "ReleaseSuperseded",
			Message: "the latest revision is marked superseded, which Helm does not leave behind normally; nothing is held"}
	default:
		return Decision{State: v1alpha1.StateUnknown, Reason: "UnknownReleaseStatus",
			Message: fmt.Sprintf("the latest revision has status %q; nothing is held", status)}
	}
}

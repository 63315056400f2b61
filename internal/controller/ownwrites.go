package controller

import (
	"slices"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// ownWrites remembers the controller's last writes to a CR (the claim and
// the status) until its cache shows them. A release is synced again on
// every event of its objects, often before the CR's own watch event
// arrives; compared with the stale CR, each of those syncs would claim it
// and write the same status again: no-op writes, but on a busy API server
// as costly as real ones.
type ownWrites struct {
	// claim is the controller name written into the managed-by
	// annotation over the CR at claimBase, which the claim turned into
	// claimed.
	claim                string
	claimBase, claimedRV string
	// status was written over the CR at any of statusBases.
	status      *v1alpha1.HelmReleaseStatus
	statusBases []string
}

// apply brings hr, the caller's own copy of the cached CR, up to the
// remembered writes the cache does not show yet, and forgets those it
// shows: a cache past a write's base shows the write, or newer ones.
func (w *ownWrites) apply(hr *v1alpha1.HelmRelease) {
	if w.claim != "" {
		if hr.ResourceVersion == w.claimBase {
			setClaim(hr, w.claim)
		} else {
			w.claim, w.claimBase, w.claimedRV = "", "", ""
		}
	}
	if w.status != nil {
		if slices.Contains(w.statusBases, hr.ResourceVersion) {
			hr.Status = *w.status.DeepCopy()
		} else {
			w.status, w.statusBases = nil, nil
		}
	}
}

// claimed remembers that hr was claimed for controller, the claim making
// resourceVersion rv, and applies the claim to hr.
func (w *ownWrites) claimed(hr *v1alpha1.HelmRelease, controller, rv string) {
	w.claim, w.claimBase, w.claimedRV = controller, hr.ResourceVersion, rv
	setClaim(hr, controller)
}

// wroteStatus remembers a status written over hr. A cache at hr's
// resourceVersion, or at the claim that hr includes without the cache
// showing it yet, lacks it.
func (w *ownWrites) wroteStatus(hr *v1alpha1.HelmRelease, status v1alpha1.HelmReleaseStatus) {
	w.status = status.DeepCopy()
	w.statusBases = []string{hr.ResourceVersion}
	if w.claim != "" && hr.ResourceVersion == w.claimBase {
		w.statusBases = append(w.statusBases, w.claimedRV)
	}
}

func setClaim(hr *v1alpha1.HelmRelease, controller string) {
	if hr.Annotations == nil {
		hr.Annotations = map[string]string{}
	}
	hr.Annotations[v1alpha1.ManagedByAnnotation] = controller
}

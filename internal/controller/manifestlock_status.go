package controller

import (
	"context"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// manifestOpenStatus is the status of a ManifestLock that holds nothing.
func manifestOpenStatus(ml *mlv1.ManifestLock, state mlv1.State, reason, message string) mlv1.ManifestLockStatus {
	s := *ml.Status.DeepCopy()
	s.State = state
	openLock(&s.LockStatus, ml.Generation, reason, message)
	return s
}

// manifestLockedStatus is the status of a ManifestLock that holds its
// manifest: its conditions are built as a HelmRelease's are.
func manifestLockedStatus(ml *mlv1.ManifestLock, st *manifestState, res engine.Result, syncErr error) mlv1.ManifestLockStatus {
	s := *ml.Status.DeepCopy()
	switch st.lock.Phase {
	case lock.Locked:
		s.State = mlv1.StateLocked
	case lock.Watching:
		s.State = mlv1.StateWatching
	default:
		s.State = mlv1.StateReconciling
	}
	heldLock(&s.LockStatus, ml.Generation, st.lock, st.lock.Holding(), res, syncErr, "in the manifest", "")
	return s
}

// writeManifestLockStatus patches the lock's status if it changed.
func (c *Controller) writeManifestLockStatus(ctx context.Context, ml *mlv1.ManifestLock, status mlv1.ManifestLockStatus) error {
	_, err := c.patchStatus(ctx, mlv1.Resource, mlv1.Kind, ml, ml.Status, status)
	return err
}

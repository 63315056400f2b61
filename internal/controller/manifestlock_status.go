package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
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
	heldLock(&s.LockStatus, ml.Generation, heldReport{lock: st.lock, settled: st.lock.Holding(), res: res, syncErr: syncErr, of: "in the manifest"})
	return s
}

// notAllHeld says, in place of a Locked or Ready condition that says the
// manifest is held, that some objects of it are not (unheld, see
// tenantHolds): a user reading the status must not take the lock for one
// that holds them.
func notAllHeld(s *v1alpha1.LockStatus, generation int64, unheld []v1alpha1.ObjectProblem) {
	if len(unheld) == 0 {
		return
	}
	msg := fmt.Sprintf("%s is not held: %s", unheld[0].Object, unheld[0].Message)
	if n := len(unheld) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more objects, see status.notLocked)", n)
	}
	for _, typ := range []string{v1alpha1.ConditionLocked, v1alpha1.ConditionReady} {
		if c := meta.FindStatusCondition(s.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			setConditions(s, generation, condition(typ, false, unheld[0].Reason, limit(msg)))
		}
	}
}

// writeManifestLockStatus patches the lock's status if it changed.
func (c *Controller) writeManifestLockStatus(ctx context.Context, ml *mlv1.ManifestLock, status mlv1.ManifestLockStatus) error {
	c.setAdmission(&status.LockStatus, ml.Spec.Mode, ml.Generation)
	_, err := c.patchStatus(ctx, mlv1.Resource, mlv1.Kind, ml, ml.Status, status)
	return err
}

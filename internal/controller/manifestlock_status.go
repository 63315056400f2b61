package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	fields, err := toJSONMap(status)
	if err != nil {
		return err
	}
	old, err := toJSONMap(ml.Status)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(fields, old) {
		return nil
	}
	for k := range old {
		if _, ok := fields[k]; !ok {
			fields[k] = nil
		}
	}
	patch, err := json.Marshal(map[string]any{"status": fields})
	if err != nil {
		return err
	}
	if _, err := c.cfg.Dynamic.Resource(mlv1.Resource).Namespace(ml.Namespace).Patch(ctx, ml.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("writing status of ManifestLock %s/%s: %w", ml.Namespace, ml.Name, err)
	}
	return nil
}

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// manifestOpenStatus is the status of a ManifestLock that holds nothing.
func manifestOpenStatus(ml *mlv1.ManifestLock, state mlv1.State, reason, message string) mlv1.ManifestLockStatus {
	s := *ml.Status.DeepCopy()
	s.State = state
	s.LockedObjects, s.NotLocked = 0, nil
	setManifestConditions(&s, ml,
		condition(v1alpha1.ConditionLocked, false, reason, message),
		metav1.Condition{Type: v1alpha1.ConditionDrifted, Status: metav1.ConditionUnknown, Reason: "LockOpen", Message: "drift is not looked for while the lock is open"},
		condition(v1alpha1.ConditionFighting, false, "LockOpen", ""),
		condition(v1alpha1.ConditionReady, false, reason, message),
	)
	return s
}

// manifestLockedStatus is the status of a ManifestLock that holds its
// manifest. Its conditions mean what a HelmRelease's do.
func manifestLockedStatus(ml *mlv1.ManifestLock, st *manifestState, res engine.Result, syncErr error) mlv1.ManifestLockStatus {
	s := *ml.Status.DeepCopy()
	s.LockedObjects = res.Locked
	var locked metav1.Condition
	switch {
	case len(res.Failed) > 0:
		f := res.Failed[0]
		locked = condition(v1alpha1.ConditionLocked, false, f.Reason,
			limit(fmt.Sprintf("the API server refuses the write of %s: %v; it is tried again at %s", objectName(f.Kind, f.Ref), f.Err, f.RetryAt.UTC().Format(time.RFC3339))))
	case len(res.Unresolved) > 0:
		locked = condition(v1alpha1.ConditionLocked, false, "WaitingForTypes", limit(joinErrors(res.Unresolved)))
	case len(res.Unwatched) > 0:
		locked = metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionUnknown, Reason: "WatchesNotSynced",
			Message: limit(fmt.Sprintf("the watches of %s do not see changes as they happen; the objects may have drifted unseen", joinResources(res.Unwatched)))}
	case syncErr != nil:
		locked = condition(v1alpha1.ConditionLocked, false, "CorrectionFailed", limit(syncErr.Error()))
	case st.lock.Warn:
		locked = condition(v1alpha1.ConditionLocked, false, "WarnMode",
			fmt.Sprintf("spec.mode is Warn: the %d objects are checked and drift is reported, never reverted", res.Objects))
	case st.lock.Phase == lock.Locked:
		locked = condition(v1alpha1.ConditionLocked, true, "Locked", fmt.Sprintf("all %d objects are held as the manifest declares", res.Objects))
	default:
		locked = condition(v1alpha1.ConditionLocked, false, "Reconciling", fmt.Sprintf("applying and checking the %d objects", res.Objects))
	}
	switch {
	case st.lock.Phase == lock.Locked:
		s.State = mlv1.StateLocked
	case st.lock.Phase == lock.Watching:
		s.State = mlv1.StateWatching
	default:
		s.State = mlv1.StateReconciling
	}
	drifted := condition(v1alpha1.ConditionDrifted, false, "InLine", "every checked object is as the manifest declares")
	if res.Drifted > 0 {
		drifted = condition(v1alpha1.ConditionDrifted, true, "Drift", fmt.Sprintf("%d of %d objects differ from the manifest", res.Drifted, res.Objects))
		if s.LastDrift != nil {
			drifted.Message += "; the last drift: " + describeRecord(s.LastDrift)
		}
	}
	fighting := condition(v1alpha1.ConditionFighting, false, "NoFight", "")
	if len(res.Fights) > 0 {
		fighting = condition(v1alpha1.ConditionFighting, true, "Fighting", limit(fightMessage(res.Fights[0])))
	}
	ready := locked
	ready.Type = v1alpha1.ConditionReady
	switch {
	case len(res.Fights) > 0:
		ready = condition(v1alpha1.ConditionReady, false, "Fighting", fighting.Message)
	case st.lock.Holding() && locked.Status != metav1.ConditionUnknown:
		ready = condition(v1alpha1.ConditionReady, true, string(s.State), locked.Message)
	}
	setManifestConditions(&s, ml, locked, drifted, fighting, ready)
	return s
}

func setManifestConditions(s *mlv1.ManifestLockStatus, ml *mlv1.ManifestLock, conds ...metav1.Condition) {
	for _, c := range conds {
		c.ObservedGeneration = ml.Generation
		meta.SetStatusCondition(&s.Conditions, c)
	}
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

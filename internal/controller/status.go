package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// openStatus is the status of a CR whose lock is open.
func openStatus(hr *v1alpha1.HelmRelease, state v1alpha1.State, revision int, reason, message string) v1alpha1.HelmReleaseStatus {
	s := *hr.Status.DeepCopy()
	s.State = state
	s.Version = revision
	s.Description = message
	s.ObservedGeneration = hr.Generation
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionLocked, Status: metav1.ConditionFalse,
		Reason: reason, Message: message, ObservedGeneration: hr.Generation,
	})
	return s
}

// lockedStatus is the status of a CR whose release is deployed. It says
// Deployed and Locked=True only once the lock has settled: every object of
// the revision checked and in line.
func lockedStatus(hr *v1alpha1.HelmRelease, st *releaseState, res engine.Result, syncErr error) v1alpha1.HelmReleaseStatus {
	s := *hr.Status.DeepCopy()
	s.Version = st.rel.Version
	if st.rel.Info != nil {
		s.Description = st.rel.Info.Description
		s.Notes = st.rel.Info.Notes
	}
	s.ObservedGeneration = hr.Generation
	cond := metav1.Condition{Type: v1alpha1.ConditionLocked, ObservedGeneration: hr.Generation}
	switch {
	case st.lock.Phase == lock.Locked:
		s.State = v1alpha1.StateDeployed
		cond.Status, cond.Reason = metav1.ConditionTrue, "Locked"
		cond.Message = fmt.Sprintf("all %d objects of revision %d are held as the manifest declares", res.Objects, st.rel.Version)
	case len(res.Unresolved) > 0:
		s.State = v1alpha1.StateTransitioning
		cond.Status, cond.Reason = metav1.ConditionFalse, "WaitingForTypes"
		cond.Message = limit(joinErrors(res.Unresolved))
	case syncErr != nil:
		s.State = v1alpha1.StateTransitioning
		cond.Status, cond.Reason = metav1.ConditionFalse, "CorrectionFailed"
		cond.Message = limit(syncErr.Error())
	default:
		s.State = v1alpha1.StateTransitioning
		cond.Status, cond.Reason = metav1.ConditionFalse, "Reconciling"
		cond.Message = fmt.Sprintf("checking the %d objects of revision %d", res.Objects, st.rel.Version)
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	return s
}

// writeStatus patches the CR's status if it changed. Unchanged statuses
// are not written, so a correction does not cost a second write.
func (c *Controller) writeStatus(ctx context.Context, hr *v1alpha1.HelmRelease, status v1alpha1.HelmReleaseStatus) error {
	if reflect.DeepEqual(hr.Status, status) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace(hr.Namespace).Patch(ctx, hr.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("writing status of HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return nil
}

func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// limit keeps condition messages within what a person reads and the API
// server's 32 KiB bound.
func limit(s string) string {
	const max = 4096
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

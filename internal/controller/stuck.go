package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// DefaultHelmOperationTimeout is how long a revision may stay pending or
// uninstalling before the lock holds the last verified revision again.
// Helm's own --timeout defaults to 5 minutes; a Helm killed mid-way never
// finishes its revision, and anyone who may write Secrets can write a
// pending one.
const DefaultHelmOperationTimeout = 15 * time.Minute

// stuckRevision is a Helm operation that outlasted the timeout, or an
// upgrade of Upgrade mode that Helm left failed.
type stuckRevision struct {
	revision int
	status   string
	since    time.Time
	// upgradeFailed says Upgrade mode's upgrade wrote the revision and
	// failed (see twoway.Renders.FailedByUpgrade).
	upgradeFailed bool
	// invalid, if set, says the revision's Secret is not one Helm wrote
	// for the release (a storage.InvalidError), and why.
	invalid string
}

func (s *stuckRevision) reason() string {
	switch {
	case s.invalid != "":
		return v1alpha1.ReasonInvalidRelease
	case s.upgradeFailed:
		return v1alpha1.ReasonUpgradeFailed
	}
	return v1alpha1.ReasonHelmOperationStuck
}

func (s *stuckRevision) message(timeout time.Duration, held int) string {
	if s.invalid != "" {
		return fmt.Sprintf("the latest revision, %d, is not one Helm wrote: %s. Revision %d, the last verified, stays held; a valid newer revision is locked as usual", s.revision, s.invalid, held)
	}
	if s.upgradeFailed {
		return fmt.Sprintf("revision %d, which the locker's Upgrade mode wrote, failed and could not be rolled back: revision %d, the last verified, stays held; a newer revision opens the lock as usual", s.revision, held)
	}
	return fmt.Sprintf("revision %d has been %s since %s, longer than the Helm operation timeout (%s): Helm was killed mid-way, or the revision was not written by Helm. Revision %d, the last verified, is held again; a newer revision opens the lock as usual",
		s.revision, s.status, s.since.UTC().Format(time.RFC3339), timeout, held)
}

// stuckOn returns the Secret of the last verified revision to hold when
// latest, a revision Helm is working on, has not been written for the
// Helm operation timeout; nil while the lock stays open, with r requeued
// for when the timeout passes.
func (c *Controller) stuckOn(st *releaseState, latest *metav1.PartialObjectMetadata, now time.Time, r *result) *metav1.PartialObjectMetadata {
	written := storage.LastWrite(latest)
	if storage.Decide(latest.GetLabels()[storage.LabelStatus]).Reason != storage.ReasonHelmWorking || st.trust.verified == nil || written.IsZero() {
		return nil
	}
	if left := c.cfg.HelmOperationTimeout - now.Sub(written); left > 0 {
		r.requeueBy(left)
		return nil
	}
	return c.verifiedSecret(st)
}

// verifiedSecret returns the Secret of the last verified revision, if the
// cache has it.
func (c *Controller) verifiedSecret(st *releaseState) *metav1.PartialObjectMetadata {
	v := st.trust.verified
	if v == nil {
		return nil
	}
	objs, err := c.secrets.GetIndexer().ByIndex(byRelease, v.Release.Namespace+"/"+v.Release.Name)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			if revision, ok := storage.Revision(m); ok && revision == v.Revision {
				return m
			}
		}
	}
	return nil
}

package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/internal/storage"
)

// DefaultHelmOperationTimeout is how long a revision may stay pending or
// uninstalling before the lock holds the last verified revision again.
// Helm's own --timeout defaults to 5 minutes; a Helm killed mid-way never
// finishes its revision, and anyone who may write Secrets can write a
// pending one.
const DefaultHelmOperationTimeout = 15 * time.Minute

// stuckRevision is a Helm operation that outlasted the timeout.
type stuckRevision struct {
	revision int
	status   string
	since    time.Time
}

func (s *stuckRevision) message(timeout time.Duration, held int) string {
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
	v := st.trust.verified
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

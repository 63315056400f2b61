package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// LockOpenError says the release moved on (Helm started working on it, or
// a new revision exists) after the lock engaged, so a write was not made.
type LockOpenError struct {
	Release  v1alpha1.ReleaseKey
	Revision int
	Latest   int
	Status   string
}

func (e *LockOpenError) Error() string {
	return fmt.Sprintf("release %s/%s moved from revision %d to revision %d (%s); not writing", e.Release.Namespace, e.Release.Name, e.Revision, e.Latest, e.Status)
}

// confirmLocked guards the engine's writes against a race with Helm: Helm
// marks a release pending before it writes objects, but the watch of the
// release Secret and the watch of an object are separate streams, so the
// object's change can arrive first. When the object about to be corrected
// was last changed by Helm's field manager after the lock engaged, or the
// write puts back what the object lacks (Helm deletes objects, and an
// upgrade that only removes a field leaves Helm's managedFields time as it
// was), the release's revisions are listed afresh before writing.
func (c *Controller) confirmLocked(rk v1alpha1.ReleaseKey, revision int, engagedAt time.Time) func(context.Context, engine.Write) error {
	// managedFields times have a resolution of one second.
	since := engagedAt.Truncate(time.Second)
	return func(ctx context.Context, w engine.Write) error {
		if w.Live != nil && !w.Restores && !c.helmChangedSince(w.Live, since) {
			return nil
		}
		latest, err := c.readLatest(ctx, rk)
		if err != nil {
			return fmt.Errorf("confirming release %s/%s is still deployed: %w", rk.Namespace, rk.Name, err)
		}
		if !c.mayHold(rk, latest, revision, time.Now()) {
			return &LockOpenError{Release: rk, Revision: revision, Latest: latest.revision, Status: latest.status}
		}
		return nil
	}
}

// latestRevision is a release's highest revision, as its Secret says.
type latestRevision struct {
	revision  int
	status    string
	lastWrite time.Time
	uid       types.UID
}

// readLatest lists the release's Secrets afresh, one request by label.
func (c *Controller) readLatest(ctx context.Context, rk v1alpha1.ReleaseKey) (latestRevision, error) {
	list, err := c.cfg.Metadata.Resource(secretsResource).Namespace(rk.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: storage.Selector(rk.Name),
	})
	if err != nil {
		return latestRevision{}, err
	}
	var l latestRevision
	for i := range list.Items {
		m := &list.Items[i]
		if v, ok := storage.Revision(m); ok && v > l.revision {
			l = latestRevision{revision: v, status: m.Labels[storage.LabelStatus], lastWrite: storage.LastWrite(m), uid: m.UID}
		}
	}
	return l, nil
}

// mayHold reports whether the lock may hold revision of rk while latest is
// the release's highest: it is that revision, deployed; or latest is a
// Helm operation stuck past the timeout (an upgrade's new revision, or the
// held one marked uninstalling; see stuckOn), or Upgrade mode's failed
// upgrade (see twoway.Renders.FailedByUpgrade).
func (c *Controller) mayHold(rk v1alpha1.ReleaseKey, latest latestRevision, revision int, now time.Time) bool {
	if latest.revision == revision && storage.Deployed(latest.status) {
		return true
	}
	if revision < latest.revision && c.twoway.FailedByUpgrade(rk, latest.revision, latest.uid) {
		return true
	}
	return revision <= latest.revision && storage.Decide(latest.status).Reason == storage.ReasonHelmWorking &&
		!latest.lastWrite.IsZero() && now.Sub(latest.lastWrite) >= c.cfg.HelmOperationTimeout
}

func (c *Controller) helmChangedSince(obj *unstructured.Unstructured, since time.Time) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Time != nil && !f.Time.Time.Before(since) && slices.Contains(c.cfg.HelmManagers, f.Manager) {
			return true
		}
	}
	return false
}

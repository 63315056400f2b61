package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/internal/twoway"
)

// TestConfirmLockedBeforeRestoring: a write that puts back what the object
// lacks lists the release afresh, even though Helm's managedFields time is
// old, since an upgrade that only removes a field leaves it so; any other
// write of an object Helm has not touched since the lock engaged does not.
func TestConfirmLockedBeforeRestoring(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	engaged := time.Now()
	confirm := c.confirmLocked(v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, 1, engaged)
	// Helm has started an upgrade whose Secret the cache has not shown.
	pending := releaseSecret(t, "pending-upgrade", 2)
	if err := c.cfg.Metadata.(*metadatafake.FakeMetadataClient).Tracker().Add(&metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: pending.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
	live := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "namespace": "apps"}}}
	old := metav1.NewTime(engaged.Add(-time.Hour))
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, Time: &old}})
	ref := engine.ObjectRef{GVR: cmGVR, Namespace: "apps", Name: "cm"}

	if err := confirm(context.Background(), engine.Write{Ref: ref, Live: live}); err != nil {
		t.Errorf("a write changing a value Helm has not touched since the lock engaged: %v, want it let through unconfirmed", err)
	}
	var open *LockOpenError
	if err := confirm(context.Background(), engine.Write{Ref: ref, Live: live, Restores: true}); !errors.As(err, &open) || open.Latest != 2 {
		t.Errorf("a write restoring a removed field during an upgrade: %v, want LockOpenError at revision 2", err)
	}
}

// TestMayHold: the lock holds a revision while it is the latest and
// deployed, and the last verified one once a Helm operation has outlasted
// the timeout, or while Upgrade mode's own failed upgrade, by its
// Secret's UID, is the latest; never while Helm may still be working.
func TestMayHold(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &Controller{cfg: Config{HelmOperationTimeout: 15 * time.Minute}}
	rk := v1alpha1.ReleaseKey{Name: "web", Namespace: "apps"}
	c.twoway = twoway.New(twoway.Config{}, nil, nil)
	t.Cleanup(c.twoway.ShutDown)
	c.twoway.RememberFailedUpgrade(v1alpha1.FailedUpgrade{Release: rk, Revision: 5, SecretUID: "upgrade-5"})
	tests := []struct {
		name     string
		latest   latestRevision
		revision int
		want     bool
	}{
		{name: "the latest, deployed", latest: latestRevision{revision: 3, status: "deployed", lastWrite: now}, revision: 3, want: true},
		{name: "a newer one deployed", latest: latestRevision{revision: 4, status: "deployed", lastWrite: now.Add(-time.Hour)}, revision: 3},
		{name: "Helm at work", latest: latestRevision{revision: 4, status: "pending-upgrade", lastWrite: now.Add(-time.Minute)}, revision: 3},
		{name: "uninstalling", latest: latestRevision{revision: 3, status: "uninstalling", lastWrite: now.Add(-time.Minute)}, revision: 3},
		{name: "stuck past the timeout", latest: latestRevision{revision: 4, status: "pending-upgrade", lastWrite: now.Add(-16 * time.Minute)}, revision: 3, want: true},
		{name: "stuck uninstalling", latest: latestRevision{revision: 3, status: "uninstalling", lastWrite: now.Add(-16 * time.Minute)}, revision: 3, want: true},
		{name: "an older revision", latest: latestRevision{revision: 3, status: "pending-rollback", lastWrite: now.Add(-16 * time.Minute)}, revision: 4},
		{name: "no write time", latest: latestRevision{revision: 4, status: "pending-upgrade"}, revision: 3},
		{name: "failed", latest: latestRevision{revision: 4, status: "failed", lastWrite: now.Add(-time.Hour)}, revision: 3},
		{name: "Upgrade mode's failed upgrade", latest: latestRevision{revision: 5, status: "failed", lastWrite: now, uid: "upgrade-5"}, revision: 4, want: true},
		{name: "another Secret of that revision", latest: latestRevision{revision: 5, status: "failed", lastWrite: now, uid: "forged"}, revision: 4},
		{name: "a revision after it", latest: latestRevision{revision: 6, status: "failed", lastWrite: now, uid: "upgrade-5"}, revision: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.mayHold(rk, tt.latest, tt.revision, now); got != tt.want {
				t.Errorf("mayHold(%+v, %d) = %v, want %v", tt.latest, tt.revision, got, tt.want)
			}
		})
	}
}

// TestKeepLastWrite: the release Secrets' cache keeps when each was last
// written, so that a revision created long ago and marked uninstalling now
// is not taken for a Helm operation stuck since its creation.
func TestKeepLastWrite(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	marked := created.Add(48 * time.Hour)
	tests := []struct {
		name    string
		managed []metav1.ManagedFieldsEntry
		want    time.Time
	}{
		{name: "never written again", managed: []metav1.ManagedFieldsEntry{{Manager: "helm", Time: &metav1.Time{Time: created}}}, want: created},
		{name: "marked uninstalling later", managed: []metav1.ManagedFieldsEntry{
			{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: created}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}},
			{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: marked}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}},
		}, want: marked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: created}, ManagedFields: tt.managed}}
			out, err := keepLastWrite(m)
			if err != nil {
				t.Fatal(err)
			}
			kept := out.(*metav1.PartialObjectMetadata)
			if got := storage.LastWrite(kept); !got.Equal(tt.want) {
				t.Errorf("LastWrite = %s, want %s", got, tt.want)
			}
			if len(kept.ManagedFields) > 1 || (len(kept.ManagedFields) == 1 && kept.ManagedFields[0].FieldsV1 != nil) {
				t.Errorf("kept managedFields %+v: want at most one entry with no fields", kept.ManagedFields)
			}
		})
	}
}

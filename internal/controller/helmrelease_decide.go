package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/lock"
)

// decide reads the release's storage and decides the lock: open, with the
// status saying why (open is true), or held, its revision declared to the
// engine. It writes nothing; an error is to retry on.
func (c *Controller) decide(ctx context.Context, req *releaseSync) (status v1alpha1.HelmReleaseStatus, open bool, err error) {
	key, hr, st := req.key, req.hr, req.st
	ignore, refused, ok := c.admitSpec(ctx, req)
	if !ok {
		return refused, true, nil
	}
	latest := c.latestSecret(hr.Spec.Release)
	if latest == nil {
		c.openState(key, st)
		status, err := c.noSecretStatus(ctx, hr)
		return status, true, err
	}
	latest, revision, opened, ok := c.revisionToHold(ctx, req, latest)
	if !ok {
		return opened, true, nil
	}
	if st.rel == nil || st.secretUID != latest.GetUID() || st.secretVersion != latest.GetResourceVersion() || st.generation != hr.Generation {
		return c.engage(ctx, req, latest, revision, ignore)
	}
	return hr.Status, false, nil
}

// admitSpec decides whether hr's spec lets its lock hold anything: not
// when it is invalid, loses a Conflict, or is suspended; the lock is then
// open, and ok false with the status saying why. It returns the spec's
// ignore rules.
func (c *Controller) admitSpec(ctx context.Context, req *releaseSync) (ignore func(*unstructured.Unstructured) []engine.Pointer, refused v1alpha1.HelmReleaseStatus, ok bool) {
	key, hr, st := req.key, req.hr, req.st
	rk := hr.Spec.Release
	if rk.Name == "" || rk.Namespace == "" {
		c.openState(key, st)
		return nil, openStatus(hr, v1alpha1.StateError, 0, v1alpha1.ReasonInvalidSpec, "spec.release.name and spec.release.namespace must both be set"), false
	}
	holder := c.lockedElsewhere(hr)
	st.holds = holder == ""
	if holder != "" {
		c.openState(key, st)
		return nil, openStatus(hr, v1alpha1.StateError, 0, v1alpha1.ReasonConflict,
			fmt.Sprintf("release %s/%s is already locked by HelmRelease %s/%s; this one holds nothing until that one is deleted", rk.Namespace, rk.Name, hr.Namespace, holder)), false
	}
	if hr.Spec.Suspend {
		// "Leave it alone": no other lock takes the objects over either.
		c.pauseState(ctx, key, hr, st)
		return nil, openStatus(hr, v1alpha1.StateSuspended, hr.Status.Version, v1alpha1.ReasonSuspended, "spec.suspend is true: the lock is open and nothing is reverted"), false
	}
	ignore, err := declare.Ignore(hr.Spec.Ignore)
	if err != nil {
		c.pauseState(ctx, key, hr, st)
		return nil, openStatus(hr, v1alpha1.StateError, 0, v1alpha1.ReasonInvalidSpec, err.Error()), false
	}
	return ignore, v1alpha1.HelmReleaseStatus{}, true
}

// revisionToHold decides which revision the lock holds while latest is
// the release's highest: latest when Helm's status lets it engage, else
// the last verified one while Helm is stuck or Upgrade mode's upgrade
// failed. Otherwise the lock opens, and ok is false with the status
// saying why.
func (c *Controller) revisionToHold(ctx context.Context, req *releaseSync, latest *metav1.PartialObjectMetadata) (held *metav1.PartialObjectMetadata, revision int, opened v1alpha1.HelmReleaseStatus, ok bool) {
	logger := klog.FromContext(ctx)
	key, hr, st := req.key, req.hr, req.st
	rk := hr.Spec.Release
	revision, _ = storage.Revision(latest)
	decision := storage.Decide(latest.GetLabels()[storage.LabelStatus])
	st.stuck = nil
	if !decision.Engage {
		verified := c.stuckOn(st, latest, time.Now(), req.result)
		upgradeFailed := verified == nil && c.twoway.FailedByUpgrade(rk, revision, latest.GetUID())
		if upgradeFailed {
			verified = c.verifiedSecret(st)
		}
		if verified == nil {
			if st.lock.Phase != lock.Unlocked && st.lock.Phase != "" {
				logger.V(2).Info("Lock opened", "release", rk.Namespace+"/"+rk.Name, "revision", revision, "reason", decision.Reason)
			}
			if decision.Forget {
				c.openState(key, st)
			} else {
				c.pauseState(ctx, key, hr, st)
			}
			return nil, 0, openStatus(hr, decision.State, revision, decision.Reason, decision.Message), false
		}
		st.stuck = &stuckRevision{revision: revision, status: latest.GetLabels()[storage.LabelStatus], since: storage.LastWrite(latest), upgradeFailed: upgradeFailed}
		latest, revision = verified, st.trust.verified.Revision
	}

	return latest, revision, v1alpha1.HelmReleaseStatus{}, true
}

// engage reads latest, revision of hr's release, and declares its objects
// to the engine: the lock holds it. An invalid revision opens the lock,
// unless an older verified one is held instead.
func (c *Controller) engage(ctx context.Context, req *releaseSync, latest *metav1.PartialObjectMetadata, revision int, ignore func(*unstructured.Unstructured) []engine.Pointer) (v1alpha1.HelmReleaseStatus, bool, error) {
	logger := klog.FromContext(ctx)
	key, hr, st := req.key, req.hr, req.st
	rk := hr.Spec.Release
	read := func(secret *metav1.PartialObjectMetadata) (*storage.Release, []*unstructured.Unstructured, error) {
		return st.rejected.read(secret, func() (*storage.Release, []*unstructured.Unstructured, error) {
			return c.readRelease(ctx, rk, secret)
		})
	}
	rel, objs, err := read(latest)
	var invalid *storage.InvalidError
	if errors.As(err, &invalid) && st.stuck == nil {
		// Anyone who may write Secrets can write an invalid
		// latest revision: it opens nothing. The last verified
		// revision stays held, and the status says why.
		if verified := c.verifiedSecret(st); verified != nil && verified.GetUID() != latest.GetUID() {
			st.stuck = &stuckRevision{revision: revision, invalid: err.Error()}
			latest, revision = verified, st.trust.verified.Revision
			if st.rel != nil && st.secretUID == latest.GetUID() && st.secretVersion == latest.GetResourceVersion() && st.generation == hr.Generation {
				return hr.Status, false, nil
			}
			rel, objs, err = read(latest)
		}
	}
	switch {
	case errors.As(err, &invalid):
		c.pauseState(ctx, key, hr, st)
		return openStatus(hr, v1alpha1.StateError, revision, v1alpha1.ReasonInvalidRelease, err.Error()), true, nil
	case err != nil:
		// Not found (the informer will catch up), or the API
		// server's error: retried.
		c.pauseState(ctx, key, hr, st)
		return hr.Status, true, err
	}
	writer, err := c.writerFor(rk.Namespace, c.serviceAccount(hr))
	if err != nil {
		c.pauseState(ctx, key, hr, st)
		return openStatus(hr, v1alpha1.StateError, revision, v1alpha1.ReasonImpersonationUnavailable, err.Error()), true, nil
	}
	verify := c.verification(ctx, st, latest, rel, objs)
	objs, st.optedOut = declare.SplitOptedOut(objs)
	st.lock = st.lock.Next(lock.Event{Type: lock.Engage, Revision: rel.Version, Warn: hr.Spec.Mode == v1alpha1.ModeWarn})
	c.declareSet(key, engine.ObjectSet{
		Objects:          objs,
		DefaultNamespace: rel.Namespace,
		ApplyManager:     rel.ApplyManager(),
		BeforeWrite:      c.confirmLocked(rk, rel.Version, time.Now()),
		ReportOnly:       st.lock.Warn,
		Prevent:          hr.Spec.Mode == v1alpha1.ModePrevent,
		Ignore:           ignore,
		Verify:           verify,
		Writer:           writer,
		Since:            hr.CreationTimestamp.Time,
	})
	c.cfg.Metrics.HoldRelease(rk.Namespace, rk.Name, kinds(objs))
	// The engine holds the parsed objects; the manifest text
	// would only double them.
	rel.Manifest = ""
	st.rel, st.secretUID, st.secretVersion, st.generation = rel, latest.GetUID(), latest.GetResourceVersion(), hr.Generation
	logger.V(2).Info("Lock engaged", "release", rk.Namespace+"/"+rk.Name, "revision", rel.Version, "objects", len(objs), "mode", hr.Spec.Mode)
	return hr.Status, false, nil
}

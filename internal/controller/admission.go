package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/admission"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// The controller answers the admission webhook for the locks it holds.
var _ admission.Locks = (*Controller)(nil)

// EventDenied is recorded on a lock for each request Prevent mode denied.
const EventDenied = "Denied"

// Judge asks the engine (see engine.Engine.Judge), and lets through what a
// tenant's lock holds but may not judge (see judgesFor).
func (c *Controller) Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (engine.Judgement, error) {
	j, err := c.engine.Judge(gvr, old, obj)
	if err != nil || !j.Denied() || c.judgesFor(j.Key, old, obj) {
		return j, err
	}
	return engine.Judgement{}, nil
}

// JudgeScale asks the engine (see engine.Engine.JudgeScale), and lets
// through what a tenant's lock holds but may not judge (see
// judgesScaleFor, which reads the object within ctx).
func (c *Controller) JudgeScale(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error) {
	j, err := c.engine.JudgeScale(gvr, namespace, name, oldReplicas, replicas)
	if err != nil || !j.Denied() || c.judgesScaleFor(ctx, j.Key, gvr, namespace, name) {
		return j, err
	}
	return engine.Judgement{}, nil
}

// Prevents asks the engine whether a Prevent lock holds the named object
// (see engine.Engine.Prevents).
func (c *Controller) Prevents(gvr schema.GroupVersionResource, namespace, name string) bool {
	return c.engine.Prevents(engine.ObjectRef{GVR: gvr, Namespace: namespace, Name: name})
}

// PreventedTypes lists the types Prevent locks hold, for the webhook's
// rules.
func (c *Controller) PreventedTypes() []schema.GroupVersionResource { return c.engine.PreventedTypes() }

// Confirm reads the release's Secrets afresh and denies only while the lock
// may still hold the revision the CR reports (see mayHold): the latest,
// deployed, or the last verified one while a Helm operation is stuck.
// Helm marks a revision pending before it writes an object, but the
// Secret's watch event can reach the lock after Helm's first write; a
// newer revision deployed is about to be locked instead. Who sent the
// request, or its field manager, never counts: anyone can send
// fieldManager=helm.
//
// It reads the held revision's Secret and the next one's by name: Helm's
// upgrade and rollback write revision N+1, its uninstall marks N. A GET is
// read from etcd; a consistent list waits for the API server's watch
// cache to catch up, which took 85 ms a denial on this machine.
func (c *Controller) Confirm(ctx context.Context, setKey string) (bool, error) {
	key, known := c.sets.Get(setKey)
	if known && key.isManifestLock() {
		return true, nil
	}
	obj, exists, err := c.crs.GetIndexer().GetByKey(key.ObjectName.String())
	if err != nil || !exists || !known {
		return false, err
	}
	hr, ok := obj.(*v1alpha1.HelmRelease)
	if !ok {
		return false, nil
	}
	rk, held := hr.Spec.Release, hr.Status.Version
	var latest latestRevision
	for _, revision := range []int{held, held + 1} {
		m, err := c.cfg.Metadata.Resource(secretsResource).Namespace(rk.Namespace).Get(ctx, storage.SecretName(rk.Name, revision), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, err
		}
		if v, ok := storage.Revision(m); !ok || v != revision {
			// Labelled as another revision than its name says: no
			// revision Helm wrote (see storage.Revision).
			continue
		}
		latest = latestRevision{revision: revision, status: m.Labels[storage.LabelStatus], lastWrite: storage.LastWrite(m), uid: m.UID}
	}
	return c.mayHold(rk, latest, held, time.Now()), nil
}

// Describe names the lock of key and how to change what it holds.
func (c *Controller) Describe(setKey string) (string, string) {
	key, known := c.sets.Get(setKey)
	if known && key.isManifestLock() {
		return key.String(), fmt.Sprintf("kubectl -n %s edit ManifestLock %s", key.Namespace, key.Name)
	}
	if obj, exists, _ := c.crs.GetIndexer().GetByKey(key.ObjectName.String()); known && exists {
		if hr, ok := obj.(*v1alpha1.HelmRelease); ok {
			rk := hr.Spec.Release
			return fmt.Sprintf("%s (release %s/%s)", key, rk.Namespace, rk.Name), fmt.Sprintf("helm upgrade %s -n %s", rk.Name, rk.Namespace)
		}
	}
	return setKey, "helm upgrade"
}

// Record reports a denial on the lock: an event naming the user, the
// metric, and status.lastDenied, which the lock's next sync writes. A
// replica standing by writes nothing, and only counts it.
func (c *Controller) Record(setKey string, d admission.Denial) {
	j := d.Judgement
	key, known := c.sets.Get(setKey)
	if c.readOnly.Load() || !known {
		_, ns, name := c.lockRef(key)
		c.cfg.Metrics.Denied(ns, name, j.Kind)
		return
	}
	record := &v1alpha1.Denial{User: d.User, Operation: d.Operation, Object: objectName(j.Kind, j.Ref), Time: metav1.NewTime(d.Time).Rfc3339Copy()}
	for _, f := range j.Fields {
		record.Paths = append(record.Paths, f.Path)
	}
	what := "a change of " + strings.Join(record.Paths, ", ")
	if j.Deleted {
		what = "its deletion"
	}
	msg := truncate(fmt.Sprintf("Denied %s of %s by %s: %s", d.Operation, record.Object, d.User, what), maxEventMessage)
	ref, ns, name := c.lockRef(key)
	if ref != nil {
		c.cfg.Recorder.Event(ref, corev1.EventTypeWarning, EventDenied, msg)
	}
	c.cfg.Metrics.Denied(ns, name, j.Kind)
	c.denials.Set(key, record)
	c.queue.Add(key)
}

// lockRef returns the object reference of key's CR for events, and the
// namespace and name the metrics give it: a release's, or the
// ManifestLock's namespace and metrics.ManifestLockRelease.
func (c *Controller) lockRef(key lockKey) (*corev1.ObjectReference, string, string) {
	if key.isManifestLock() {
		obj, exists, _ := c.locks.GetIndexer().GetByKey(key.ObjectName.String())
		ml, _ := obj.(*mlv1.ManifestLock)
		if !exists || ml == nil {
			return nil, "", ""
		}
		return manifestLockRef(ml), ml.Namespace, metrics.ManifestLockRelease(ml.Name)
	}
	obj, exists, _ := c.crs.GetIndexer().GetByKey(key.ObjectName.String())
	hr, _ := obj.(*v1alpha1.HelmRelease)
	if !exists || hr == nil {
		return nil, "", ""
	}
	return crRef(hr), hr.Spec.Release.Namespace, hr.Spec.Release.Name
}

// lastDenied returns key's last denial, from Record, or written, the one
// its status shows.
func (c *Controller) lastDenied(key lockKey, written *v1alpha1.Denial) *v1alpha1.Denial {
	if r, ok := c.denials.Get(key); ok && r != nil {
		return r.DeepCopy()
	}
	return written
}

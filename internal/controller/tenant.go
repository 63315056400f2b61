package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// The trust rules of a tenant's ManifestLock: one outside the registration
// namespace, which anyone granted ManifestLock create there may write. An
// admin's locks (HelmReleases, ManifestLocks of the registration
// namespace) are trusted as their authors are; a tenant's lock may only
// keep what its author could keep by hand:
//
//   - it writes as a ServiceAccount of its namespace that opted in to it
//     (mlv1.WritersAnnotation), else it holds nothing (writerPermitted);
//   - an admin's lock holds an object before it, whatever the order they
//     were created in (engine.ObjectSet.Precedence);
//   - it holds an object only if it creates it, or it carries the lock's
//     marker, or its writer may write the marker on (adopt); never one
//     Helm installed (tenantHolds); and each write checks that again of
//     the object as it is then (tenantWriteGuard);
//   - Prevent mode judges for it only what, as the API server has it,
//     carries its marker and not Helm's ownership (judgesFor).

// Events of a tenant's ManifestLock.
const (
	// EventWriterNotPermitted: the lock's ServiceAccount does not let
	// it write as it (see mlv1.WritersAnnotation).
	EventWriterNotPermitted = mlv1.ReasonWriterNotPermitted
	// EventNotAdopted: an object of the manifest is not held (see
	// tenantHolds).
	EventNotAdopted = "NotAdopted"
)

// tenantPrecedence is the engine Precedence of a tenant's lock, below
// every admin's lock (0).
const tenantPrecedence = -1

// permittedRetry is how often a lock whose writer did not opt in looks
// again when no ServiceAccount watch tells it of a change.
const permittedRetry = time.Minute

var serviceAccountsResource = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}

// isTenant reports whether ml is a tenant's lock.
func (c *Controller) isTenant(ml *mlv1.ManifestLock) bool { return ml.Namespace != c.cfg.Namespace }

// tenantLock returns namespace/name of the tenant ManifestLock of an
// engine set key, and false for any other lock's key. known is false for
// a set the controller no longer holds.
func (c *Controller) tenantLock(setKey string) (ref string, tenant, known bool) {
	key, known := c.sets.Get(setKey)
	return key.ObjectName.String(), known && key.isManifestLock() && key.Namespace != c.cfg.Namespace, known
}

// permits reports whether the value of a ServiceAccount's
// mlv1.WritersAnnotation names lock.
func permits(value, lock string) bool {
	for _, name := range strings.Split(value, ",") {
		if name = strings.TrimSpace(name); name == "*" || name == lock {
			return true
		}
	}
	return false
}

// serviceAccountInformer watches the metadata of every ServiceAccount,
// keeping only mlv1.WritersAnnotation, and queues the locks of its
// namespace when that changes. It runs only for a controller that serves
// tenants' locks everywhere: a few hundred bytes per ServiceAccount, where
// a GET per sync would cost a request for every drift of a tenant's lock.
func (c *Controller) serviceAccountInformer(client metadata.Interface) cache.SharedIndexInformer {
	accounts := client.Resource(serviceAccountsResource)
	inf := cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(informers.Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return accounts.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return accounts.Watch(ctx, o)
			},
		}, c.cfg.Readiness, nil), client),
		&metav1.PartialObjectMetadata{},
		cache.SharedIndexInformerOptions{ObjectDescription: "ServiceAccounts"})
	_ = inf.SetTransform(func(obj any) (any, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil
		}
		out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion}}
		if v, ok := m.Annotations[mlv1.WritersAnnotation]; ok {
			out.Annotations = map[string]string{mlv1.WritersAnnotation: v}
		}
		return out, nil
	})
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			c.enqueueManifestLocksIn(m.GetNamespace())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				changed(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, _ := meta.Accessor(old)
			n, _ := meta.Accessor(obj)
			if o == nil || n == nil || o.GetAnnotations()[mlv1.WritersAnnotation] != n.GetAnnotations()[mlv1.WritersAnnotation] {
				changed(obj)
			}
		},
		DeleteFunc: changed,
	})
	return inf
}

// enqueueManifestLocksIn queues the ManifestLocks of namespace.
func (c *Controller) enqueueManifestLocksIn(namespace string) {
	for _, obj := range c.locks.GetStore().List() {
		if key, ok := keyOf(mlv1.Kind, obj); ok && key.Namespace == namespace {
			c.queue.Add(key)
		}
	}
}

// writerAnnotations returns the annotations of the ServiceAccount a lock
// writes as (nil, false if it does not exist): from the watch when it has
// listed, else with a GET.
func (c *Controller) writerAnnotations(ctx context.Context, namespace, name string) (map[string]string, bool, error) {
	if inf := c.serviceAccounts; inf != nil && inf.HasSynced() {
		obj, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
		if err != nil || !exists {
			return nil, false, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, false, err
		}
		return m.GetAnnotations(), true, nil
	}
	m, err := c.cfg.Metadata.Resource(serviceAccountsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return m.Annotations, true, nil
}

// writerPermitted says whether tenant lock ml may write as ServiceAccount
// sa of its namespace, and if not, why, for its status.
func (c *Controller) writerPermitted(ctx context.Context, ml *mlv1.ManifestLock, sa string) (bool, string, error) {
	annotations, exists, err := c.writerAnnotations(ctx, ml.Namespace, sa)
	switch {
	case err != nil:
		return false, "", err
	case !exists:
		return false, fmt.Sprintf("the lock writes as ServiceAccount %s/%s, which does not exist; create it, annotated %s: %q, and grant it what the lock must write. The lock holds nothing until then",
			ml.Namespace, sa, mlv1.WritersAnnotation, ml.Name), nil
	case permits(annotations[mlv1.WritersAnnotation], ml.Name):
		return true, "", nil
	}
	return false, fmt.Sprintf("ServiceAccount %s/%s, which the lock writes as, does not let it: a ManifestLock outside the registration namespace writes only as an account that names it in its %s annotation. To allow it: kubectl -n %s annotate serviceaccount %s %s=%s (a comma-separated list of locks, or \"*\" for every lock of the namespace). The lock holds nothing until then",
		ml.Namespace, sa, mlv1.WritersAnnotation, ml.Namespace, sa, mlv1.WritersAnnotation, ml.Name), nil
}

// notPermitted opens a tenant's lock whose writer did not opt in, and says
// so, with an event when the status did not say it already.
func (c *Controller) notPermitted(ctx context.Context, req *manifestSync, why string) mlv1.ManifestLockStatus {
	ml := req.ml
	c.openManifestLock(req.key, req.st)
	if c.serviceAccounts == nil {
		req.result.requeueBy(permittedRetry)
	}
	if ready := meta.FindStatusCondition(ml.Status.Conditions, v1alpha1.ConditionReady); !c.readOnly.Load() && (ready == nil || ready.Reason != mlv1.ReasonWriterNotPermitted || ready.Message != why) {
		c.cfg.Recorder.Event(manifestLockRef(ml), corev1.EventTypeWarning, EventWriterNotPermitted, truncate(why, maxEventMessage))
	}
	return manifestOpenStatus(ml, mlv1.StateError, mlv1.ReasonWriterNotPermitted, why)
}

// tenantHolds decides which of a tenant's objects its lock holds, given
// each as the API server has it (live, read once by heldObjects; nil for
// one that does not exist), and says why it does not hold the others. It
// holds an object that does not exist (it creates it, with its marker),
// and one that carries its marker. It adopts one that exists without its
// marker only if a server-side dry run of writing the marker on, as the
// lock's writer, is allowed: so that it never holds, or freezes in Prevent
// mode, what its author could not write. It never holds an object Helm
// installed (see mlv1.ReasonInstalledByHelm). Refusals are announced once
// in an event.
func (c *Controller) tenantHolds(ctx context.Context, ml *mlv1.ManifestLock, objs []*unstructured.Unstructured, namespace string, writer dynamic.Interface, live map[mlv1.ObjectRef]*metav1.PartialObjectMetadata) (holding, error) {
	if writer == nil {
		writer = c.cfg.Dynamic
	}
	marker := ml.Namespace + "/" + ml.Name
	h := holding{adopted: map[types.UID]bool{}}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := c.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			// manifestRefs refused the lock for it already.
			return holding{}, fmt.Errorf("mapping %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		ns := obj.GetNamespace()
		if ns == "" {
			ns = namespace
		}
		ref := mlv1.ObjectRef{APIVersion: obj.GetAPIVersion(), Kind: gvk.Kind, Namespace: ns, Name: obj.GetName()}
		m, read := live[ref]
		switch {
		case !read:
			return holding{}, fmt.Errorf("%s %s was not read", gvk.Kind, inventoryName(ref))
		case m == nil:
			h.objs = append(h.objs, obj)
			continue
		}
		if release, ok := m.Annotations[storage.AnnotationReleaseName]; ok {
			h.unheld = append(h.unheld, v1alpha1.ObjectProblem{Object: gvk.Kind + " " + inventoryName(ref), Reason: mlv1.ReasonInstalledByHelm,
				Message: limit(fmt.Sprintf("installed by Helm release %s/%s: a ManifestLock outside the registration namespace never holds what Helm installs, so that Helm and the release's owner are never stopped by it; a HelmRelease holds a release",
					m.Annotations[storage.AnnotationReleaseSpace], release))})
			continue
		}
		if m.Annotations[mlv1.MarkerAnnotation] == marker {
			h.objs = append(h.objs, obj)
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{mlv1.MarkerAnnotation: marker}}})
		_, err = writer.Resource(mapping.Resource).Namespace(ns).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			h.objs = append(h.objs, obj)
			if m.UID != "" {
				h.adopted[m.UID] = true
			}
		case apierrors.IsForbidden(err):
			h.unheld = append(h.unheld, v1alpha1.ObjectProblem{Object: gvk.Kind + " " + inventoryName(ref), Reason: mlv1.ReasonForbidden,
				Message: limit(fmt.Sprintf("it exists without this lock's %s annotation, and the lock's writer may not write it, so the lock does not adopt it: %v", mlv1.MarkerAnnotation, err))})
		default:
			return holding{}, fmt.Errorf("adopting %s %s: %w", gvk.Kind, inventoryName(ref), err)
		}
	}
	if !c.readOnly.Load() {
		for _, p := range h.unheld {
			if !slices.Contains(ml.Status.NotLocked, p) {
				c.cfg.Recorder.Event(manifestLockRef(ml), corev1.EventTypeWarning, EventNotAdopted, truncate(p.Object+": "+p.Message, maxEventMessage))
			}
		}
	}
	return h, nil
}

// NotHeldError says a tenant's lock did not write an object it holds:
// as the object was just before the write, the lock may no longer hold
// it (see tenantWriteGuard). Reason is mlv1.ReasonInstalledByHelm or
// mlv1.ReasonNotMarked.
type NotHeldError struct {
	Reason string
	// Release is namespace/name of the Helm release whose annotations
	// the object carries, for mlv1.ReasonInstalledByHelm.
	Release string
}

func (e *NotHeldError) Error() string {
	if e.Reason == mlv1.ReasonInstalledByHelm {
		return fmt.Sprintf("not written: it carries the %s annotation of Helm release %s, which installed it or took it over, and a ManifestLock outside the registration namespace never writes what Helm installs", storage.AnnotationReleaseName, e.Release)
	}
	return fmt.Sprintf("not written: it exists without this lock's %s annotation, and is not the object the lock adopted; whether the lock may adopt it is decided again", mlv1.MarkerAnnotation)
}

// tenantWriteGuard is the engine.ObjectSet.BeforeWrite of a tenant's lock.
// tenantHolds decides what the lock holds when it reads its manifest; by
// the engine's write, the object may have changed hands: someone may have
// created one the lock was about to create (an admin's helm install of
// that name, say), or Helm taken over one the lock created (helm install
// --take-ownership). So every write over a live object is checked again
// against the object as the engine read it: one carrying Helm's release
// annotation is never written, and one without the lock's marker only if
// it is the very object (by UID) the lock adopted after its dry run.
// Creating a missing object is let through: the lock creates it with its
// marker. A refusal is a *NotHeldError, and the lock's next sync decides
// again what it holds.
func tenantWriteGuard(ml *mlv1.ManifestLock, adopted map[types.UID]bool) func(context.Context, engine.Write) error {
	marker := ml.Namespace + "/" + ml.Name
	return func(_ context.Context, w engine.Write) error {
		if w.Live == nil {
			return nil
		}
		annotations := w.Live.GetAnnotations()
		if release, ok := annotations[storage.AnnotationReleaseName]; ok {
			return &NotHeldError{Reason: mlv1.ReasonInstalledByHelm, Release: annotations[storage.AnnotationReleaseSpace] + "/" + release}
		}
		if annotations[mlv1.MarkerAnnotation] != marker && !adopted[w.Live.GetUID()] {
			return &NotHeldError{Reason: mlv1.ReasonNotMarked}
		}
		return nil
	}
}

// writeRefused reports whether tenantWriteGuard refused a write of res.
func writeRefused(res engine.Result) bool {
	for _, d := range res.Drifts {
		var notHeld *NotHeldError
		if errors.As(d.Err, &notHeld) {
			return true
		}
	}
	return false
}

// judgesFor reports whether Prevent mode may judge a request for the lock
// of key, given the object as the API server has it (old; obj for a
// creation). An admin's lock judges all it holds. A tenant's judges only
// an object that carries its marker and not Helm's ownership: the marker
// is on what it created or adopted (see tenantHolds), and only someone able to
// write the object can put it there; Helm's ownership means an admin's
// release, which a tenant's lock never stops, whatever it declares.
func (c *Controller) judgesFor(key string, old, obj *unstructured.Unstructured) bool {
	ref, tenant, known := c.tenantLock(key)
	if !tenant {
		return known
	}
	target := old
	if target == nil {
		target = obj
	}
	return target != nil && claimedBy(target.GetAnnotations(), ref)
}

// claimedBy reports whether an object's annotations name the tenant lock
// ref as its holder, and not a Helm release.
func claimedBy(annotations map[string]string, ref string) bool {
	_, helm := annotations[storage.AnnotationReleaseName]
	return !helm && annotations[mlv1.MarkerAnnotation] == ref
}

// scaleJudgeTimeout bounds the read a scale request held by a tenant's
// lock costs: the request carries a Scale, not the object's annotations.
// It is read within the review's context, which ends when the API server
// stops waiting for the webhook (its timeoutSeconds) or the client goes;
// this bound keeps one read from spending all of that.
const scaleJudgeTimeout = time.Second

// judgesScaleFor is judgesFor for the scale subresource: it reads the
// object's metadata, within the review's ctx, and lets the request through
// if it cannot.
func (c *Controller) judgesScaleFor(ctx context.Context, key string, gvr schema.GroupVersionResource, namespace, name string) bool {
	ref, tenant, known := c.tenantLock(key)
	if !tenant {
		return known
	}
	ctx, cancel := context.WithTimeout(ctx, scaleJudgeTimeout)
	defer cancel()
	m, err := c.cfg.Metadata.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	return err == nil && claimedBy(m.Annotations, ref)
}

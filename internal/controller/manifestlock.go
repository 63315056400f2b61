package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/lock"
	"github.com/helm-locker/helm-locker/manifest"
)

// manifestState is what the controller remembers of one ManifestLock
// between syncs. Only the worker syncing its key touches it.
type manifestState struct {
	lock lock.Lock
	// declared says what the engine holds: the manifest's digest and the
	// spec generation it was declared under; declarations counts them.
	declared     string
	declarations int
	// missing are the declaration's objects that did not exist when it
	// was declared: the lock creates them, and they join the inventory
	// once it has.
	missing map[mlv1.ObjectRef]bool
	// inventory is status.inventory, kept here once read.
	inventory []mlv1.ObjectRef
	// unheld are the objects of a tenant's manifest the lock does not
	// hold, and why (see tenantHolds), as of its declaration.
	unheld []v1alpha1.ObjectProblem
	// attempted and applied are the revisions of spec.sourceRef's
	// artifact last read and held (status.lastAttemptedRevision and
	// lastAppliedRevision), and built what the last one read built to.
	attempted, applied string
	built              builtSource
	bookkeeping
}

// manifestSync is one sync of a ManifestLock: the request every kind of
// lock carries, with the CR and what the controller remembers of it.
type manifestSync struct {
	syncRequest
	ml *mlv1.ManifestLock
	st *manifestState
}

// newManifestSync starts a sync of key's ManifestLock ml; r collects what
// it asks of the queue. The revision the lock holds is set once the
// manifest is declared (see syncManifestObjects).
func newManifestSync(key lockKey, ml *mlv1.ManifestLock, st *manifestState, r *result) *manifestSync {
	return &manifestSync{syncRequest: syncRequest{key: key, lock: &st.lock, result: r}, ml: ml, st: st}
}

func (c *Controller) enqueueManifestLock(obj any) {
	if key, ok := keyOf(mlv1.Kind, obj); ok {
		c.queue.Add(key)
	}
}

// servesManifestLock reports whether this controller serves ml (see
// mlv1.ManagedByAnnotation).
func (c *Controller) servesManifestLock(ml *mlv1.ManifestLock) bool {
	if owner := ml.Annotations[mlv1.ManagedByAnnotation]; owner != "" {
		return owner == c.cfg.ControllerName
	}
	return ml.Namespace == c.cfg.Namespace || c.cfg.TenantManifestLocks
}

// syncManifestLock brings one ManifestLock in line: observe the CR and its
// manifest, decide what may be held, act (prune, declare, sync) and report.
func (c *Controller) syncManifestLock(ctx context.Context, key lockKey) (result, error) {
	ml, st := c.observeManifestLock(ctx, key)
	if ml == nil {
		return result{}, nil
	}
	var res result
	status, syncErr := c.reconcileManifestLock(ctx, newManifestSync(key, ml, st, &res))
	if c.readOnly.Load() {
		return res, syncErr
	}
	status.ObservedGeneration = ml.Generation
	status.DriftsDetected, status.DriftsCorrected, status.LastDrift = st.driftsDetected, st.corrected, st.lastDrift
	status.LastDenied = c.lastDenied(key, ml.Status.LastDenied)
	status.Inventory = st.inventory
	status.LastAttemptedRevision, status.LastAppliedRevision = st.attempted, st.applied
	err := c.writeManifestLockStatus(ctx, ml, status)
	if errors.Is(err, errLabelsChanged) {
		res.requeueBy(labelsChangedRetry)
		err = nil
	}
	return res, errors.Join(syncErr, err)
}

// observeManifestLock returns a copy of the ManifestLock key names, from
// the cache, and what the controller remembers of it. A lock that is gone,
// or that this controller does not serve, is let go of: nothing is
// returned, and what it held is left as it is.
func (c *Controller) observeManifestLock(ctx context.Context, key lockKey) (*mlv1.ManifestLock, *manifestState) {
	obj, exists, _ := c.locks.GetIndexer().GetByKey(key.ObjectName.String())
	if !exists {
		// Deleting the lock deletes nothing it held.
		c.open(key)
		c.mls.Delete(key)
		c.denials.Delete(key)
		c.sources.watch(key, nil)
		c.cfg.Metrics.ForgetManifestLock(key.Namespace, key.Name)
		return nil, nil
	}
	ml, ok := obj.(*mlv1.ManifestLock)
	if !ok {
		klog.FromContext(ctx).Error(nil, "Cannot read ManifestLock; ignoring it", "manifestLock", key.ObjectName)
		return nil, nil
	}
	if !c.servesManifestLock(ml) {
		c.open(key)
		c.mls.Delete(key)
		c.sources.watch(key, nil)
		c.cfg.Metrics.ForgetManifestLock(ml.Namespace, ml.Name)
		return nil, nil
	}
	ml = ml.DeepCopy()
	st := c.mls.GetOrCreate(key, func() *manifestState { return &manifestState{} })
	if !st.counted {
		st.counted = true
		st.driftsDetected, st.corrected, st.lastDrift = ml.Status.DriftsDetected, ml.Status.DriftsCorrected, ml.Status.LastDrift.DeepCopy()
		st.inventory = slices.Clone(ml.Status.Inventory)
		st.attempted, st.applied = ml.Status.LastAttemptedRevision, ml.Status.LastAppliedRevision
	}
	return ml, st
}

// reconcileManifestLock declares the lock's manifest, if it changed, and
// syncs its objects, and returns the status to report, with an error to
// retry on.
func (c *Controller) reconcileManifestLock(ctx context.Context, req *manifestSync) (mlv1.ManifestLockStatus, error) {
	ml := req.ml
	d, status, err := c.declareManifestLock(ctx, req)
	switch {
	case d == nil:
		return status, err
	case c.readOnly.Load():
		// A replica standing by syncs nothing, so nothing else
		// resolves what it declared for Judge.
		if d.changed {
			c.engine.Prepare(ctx)
		}
		c.engine.Standby(req.key.String())
		return ml.Status, nil
	}
	status, syncErr := c.syncManifestObjects(ctx, req, d.optedOut)
	status.ManifestDigest = d.digest
	return status, syncErr
}

// manifestDeclaration is what declareManifestLock read of a lock's
// manifest that its sync goes on with.
type manifestDeclaration struct {
	digest string
	// optedOut are the manifest's objects the lock leaves out.
	optedOut []v1alpha1.ObjectProblem
	// changed says the manifest was declared now: it differed from what
	// the engine held.
	changed bool
}

// declareManifestLock observes the lock's manifest, decides what it may
// hold and as whom, and, if that changed since it was last declared, acts:
// a leader prunes what the new manifest drops and notes what the lock is
// to create, and any replica declares it to the engine. It is the first
// step of every sync, and what declareAll does for every lock at startup,
// so that a new leader's webhook rules and a standby's answers count every
// lock as soon as the controller is synced (see Controller.Synced). With
// no declaration, the lock ends with status (and an error to retry on).
func (c *Controller) declareManifestLock(ctx context.Context, req *manifestSync) (*manifestDeclaration, mlv1.ManifestLockStatus, error) {
	key, ml, st := req.key, req.ml, req.st
	if ml.Spec.Suspend {
		c.pauseManifestLock(key, st)
		c.sources.watch(key, nil)
		return nil, manifestOpenStatus(ml, mlv1.StateSuspended, v1alpha1.ReasonSuspended, "spec.suspend is true: the lock is open and nothing is reverted"), nil
	}
	ended := func(status mlv1.ManifestLockStatus, err error) (*manifestDeclaration, mlv1.ManifestLockStatus, error) {
		return nil, status, err
	}

	// Observe: the manifest, wherever it is kept.
	text, revision, err := c.manifestText(ctx, key, ml, st)
	var se *sourceError
	switch {
	case errors.As(err, &se) && se.retry:
		status, syncErr := c.manifestError(ctx, req, se.reason, limit(se.message))
		return nil, status, errors.Join(err, syncErr)
	case errors.As(err, &se):
		return ended(c.manifestError(ctx, req, se.reason, limit(se.message)))
	case apierrors.IsNotFound(err) || errors.Is(err, errNoManifest):
		return ended(c.manifestError(ctx, req, mlv1.ReasonManifestUnavailable, err.Error()))
	case err != nil:
		return nil, ml.Status, err
	}
	objs, err := manifest.Parse(strings.NewReader(text))
	if err != nil {
		return ended(c.manifestError(ctx, req, mlv1.ReasonInvalidManifest, "spec.manifest: "+err.Error()))
	}
	objs, optedOut := declare.SplitOptedOut(objs)
	ignore, err := declare.Ignore(ml.Spec.Ignore)
	if err != nil {
		return ended(c.manifestError(ctx, req, v1alpha1.ReasonInvalidSpec, err.Error()))
	}

	// Decide: what this lock may hold, and as whom it writes.
	namespace := ml.Spec.Namespace
	if namespace == "" {
		namespace = ml.Namespace
	}
	refs, err := c.manifestRefs(ml, objs, namespace)
	if err != nil {
		var forbidden *forbiddenError
		if errors.As(err, &forbidden) {
			c.openManifestLock(key, st)
			return nil, manifestOpenStatus(ml, mlv1.StateError, mlv1.ReasonForbidden, limit(err.Error())), nil
		}
		return ended(c.manifestError(ctx, req, mlv1.ReasonInvalidManifest, limit(err.Error())))
	}
	writer, status, ok, err := c.manifestWriter(ctx, req)
	if !ok {
		return nil, status, err
	}

	// Act: declare what changed.
	d := &manifestDeclaration{digest: manifestDigest(text), optedOut: optedOut}
	declared := d.digest + fmt.Sprintf("/%d", ml.Generation)
	if declared == st.declared {
		st.applied = revision
		return d, ml.Status, nil
	}
	h, err := c.heldObjects(ctx, ml, objs, refs, namespace, writer, st.inventory)
	if err != nil {
		return nil, ml.Status, err
	}
	applied := false
	if !c.readOnly.Load() {
		// A replica standing by writes nothing: it prunes nothing, and
		// what the lock creates is the leader's to note.
		if applied, err = c.engageManifest(ctx, req, refs, h.missing, writer, d.digest); err != nil {
			return nil, ml.Status, err
		}
		klog.FromContext(ctx).V(2).Info("ManifestLock engaged", "objects", len(h.objs), "notHeld", len(h.unheld), "created", len(st.missing), "mode", ml.Spec.Mode)
	}
	st.declared, st.unheld, d.changed, st.applied = declared, h.unheld, true, revision
	c.declareSet(key, c.manifestSet(ml, h, namespace, ignore, writer, applied))
	return d, ml.Status, nil
}

// manifestWriter decides as whom req's lock writes: a tenant's lock only
// as a ServiceAccount that lets it. When it may not write, ok is false,
// with the status to report or an error to retry on.
func (c *Controller) manifestWriter(ctx context.Context, req *manifestSync) (writer dynamic.Interface, status mlv1.ManifestLockStatus, ok bool, err error) {
	ml := req.ml
	sa := c.manifestServiceAccount(ml)
	if c.isTenant(ml) {
		permitted, why, err := c.writerPermitted(ctx, ml, sa)
		if err != nil {
			return nil, ml.Status, false, err
		}
		if !permitted {
			return nil, c.notPermitted(ctx, req, why), false, nil
		}
	}
	writer, err = c.writerFor(ml.Namespace, sa)
	if err != nil {
		status, err := c.manifestError(ctx, req, v1alpha1.ReasonImpersonationUnavailable, err.Error())
		return nil, status, false, err
	}
	return writer, ml.Status, true, nil
}

// engageManifest readies a leader's lock for a new manifest, before it is
// declared: it prunes what the last one created and this one drops, notes
// missing, the objects that do not exist yet (the lock creates them, and
// they join its inventory once it has), and engages the lock. applied
// says the manifest is not new: after a restart or a suspension, the one
// the status says was held is declared again, and what differs from it
// now, someone else changed.
func (c *Controller) engageManifest(ctx context.Context, req *manifestSync, refs, missing map[mlv1.ObjectRef]bool, writer dynamic.Interface, digest string) (applied bool, err error) {
	ml, st := req.ml, req.st
	if ml.Spec.Prune {
		if err := c.prune(ctx, ml, st, refs, writer); err != nil {
			return false, err
		}
	}
	st.declarations++
	st.missing = missing
	st.lock = st.lock.Next(lock.Event{Type: lock.Engage, Revision: st.declarations, Warn: ml.Spec.Mode == v1alpha1.ModeWarn})
	return st.declared == "" && ml.Status.ManifestDigest == digest, nil
}

// manifestSet is what a ManifestLock declares to the engine. In Prevent
// mode every object carries the lock's marker, so that the webhook is sent
// its requests (see mlv1.MarkerAnnotation); a tenant's lock that writes
// marks its objects in every mode, as the proof that it created or
// adopted them (see tenantHolds), and checks each write against the
// object as it is then (see tenantWriteGuard). A tenant's lock ranks below
// every admin's lock for an object both declare (see tenantPrecedence).
func (c *Controller) manifestSet(ml *mlv1.ManifestLock, h holding, namespace string, ignore func(*unstructured.Unstructured) []engine.Pointer, writer dynamic.Interface, applied bool) engine.ObjectSet {
	objs := h.objs
	prevent := ml.Spec.Mode == v1alpha1.ModePrevent
	tenant := c.isTenant(ml)
	if prevent || (tenant && ml.Spec.Mode != v1alpha1.ModeWarn) {
		for _, obj := range objs {
			annotations := obj.GetAnnotations()
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[mlv1.MarkerAnnotation] = ml.Namespace + "/" + ml.Name
			obj.SetAnnotations(annotations)
		}
	}
	set := engine.ObjectSet{
		Objects:          objs,
		DefaultNamespace: namespace,
		ReportOnly:       ml.Spec.Mode == v1alpha1.ModeWarn,
		Prevent:          prevent,
		Ignore:           ignore,
		Writer:           writer,
		Since:            ml.CreationTimestamp.Time,
		Applied:          applied,
	}
	if tenant {
		set.Precedence = tenantPrecedence
		set.BeforeWrite = tenantWriteGuard(ml, h.adopted)
	}
	return set
}

// syncManifestObjects syncs the declaration the engine holds for the lock
// and reports it.
//
// Unlike a HelmRelease's, the lock counts none of the controller's own
// caches as unwatched (see syncRequest.caches): no Helm operation opens it
// behind the locker's back, so a ManifestLock CR cache that lags delays an
// edit of the lock at worst, and the lock then holds the manifest it last
// read, as it does when the manifest cannot be read (see manifestError).
// What it holds is still watched, and reported, through the engine's
// informers; the CR cache's outage shows in the controller's readiness
// (see Watching). The manifest sources' watches keep no health to report.
func (c *Controller) syncManifestObjects(ctx context.Context, req *manifestSync, optedOut []v1alpha1.ObjectProblem) (status mlv1.ManifestLockStatus, err error) {
	ml, st := req.ml, req.st
	req.revision = st.declarations
	err = c.afterSync(ctx, &req.syncRequest, func(res engine.Result, syncErr error) {
		if c.isTenant(ml) && (appearedUnmade(st, res) || writeRefused(res)) {
			// Someone else made an object the lock was to create, or
			// tenantWriteGuard refused a write: whether the lock may
			// hold the object is decided again (see tenantHolds), by a
			// new declaration at once.
			st.declared = ""
			req.result.requeueBy(time.Millisecond)
		}
		c.recordManifestDrifts(ctx, ml, st, res)
		status = manifestLockedStatus(ml, st, res, syncErr)
		status.NotLocked = notLocked(append(slices.Clone(optedOut), st.unheld...), 0, res, syncErr)
		notAllHeld(&status.LockStatus, ml.Generation, st.unheld)
	})
	return status, err
}

// appearedUnmade reports whether res found an object that did not exist
// when the lock was declared, and that the lock did not create: it exists,
// and differs from the declaration.
func appearedUnmade(st *manifestState, res engine.Result) bool {
	for _, d := range res.Drifts {
		ref := mlv1.ObjectRef{APIVersion: d.Ref.GVR.GroupVersion().String(), Kind: d.Kind, Namespace: d.Ref.Namespace, Name: d.Ref.Name}
		if !d.Deleted && st.missing[ref] {
			return true
		}
	}
	return false
}

// forbiddenError lists objects a ManifestLock outside the registration
// namespace may not hold.
type forbiddenError struct{ objects []string }

func (e *forbiddenError) Error() string {
	return "a ManifestLock outside the registration namespace holds objects of its own namespace only, and nothing is written while it names others: " + strings.Join(e.objects, ", ")
}

// manifestRefs resolves the objects' scopes and names them as the
// inventory does. A lock outside the registration namespace is a tenant's:
// every object must be namespaced and in the lock's own namespace, or none
// is held (a forbiddenError). Kinds the API server does not serve yet are
// left for the engine to report, unless the lock is a tenant's.
func (c *Controller) manifestRefs(ml *mlv1.ManifestLock, objs []*unstructured.Unstructured, namespace string) (map[mlv1.ObjectRef]bool, error) {
	tenant := c.isTenant(ml)
	// The scopes of the kinds whose CRDs the manifest declares, for their
	// objects: the API server does not serve them yet.
	scopes := map[schema.GroupKind]string{}
	for _, obj := range objs {
		if obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(obj.Object, "spec", "scope")
			scopes[schema.GroupKind{Group: group, Kind: kind}] = scope
		}
	}
	refs := map[mlv1.ObjectRef]bool{}
	var forbidden []string
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		ref := mlv1.ObjectRef{APIVersion: obj.GetAPIVersion(), Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
		mapping, err := c.cfg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case err != nil && tenant:
			forbidden = append(forbidden, fmt.Sprintf("%s %s (a kind not served, whose scope cannot be checked)", gvk.Kind, obj.GetName()))
			continue
		case err != nil:
			if scopes[gvk.GroupKind()] == "Namespaced" && ref.Namespace == "" {
				ref.Namespace = namespace
			}
			refs[ref] = true
			continue
		case mapping.Scope.Name() != meta.RESTScopeNameNamespace:
			ref.Namespace = ""
			if tenant {
				forbidden = append(forbidden, fmt.Sprintf("%s %s (cluster-scoped)", gvk.Kind, obj.GetName()))
				continue
			}
		case ref.Namespace == "":
			ref.Namespace = namespace
		}
		if tenant && ref.Namespace != ml.Namespace {
			forbidden = append(forbidden, fmt.Sprintf("%s %s/%s (another namespace)", gvk.Kind, ref.Namespace, ref.Name))
			continue
		}
		refs[ref] = true
	}
	if len(forbidden) > 0 {
		return nil, &forbiddenError{objects: forbidden}
	}
	return refs, nil
}

// manifestServiceAccount is the identity a ManifestLock's writes take. A
// tenant's lock always writes as a ServiceAccount of its namespace.
func (c *Controller) manifestServiceAccount(ml *mlv1.ManifestLock) string {
	switch {
	case ml.Spec.ServiceAccountName != "":
		return ml.Spec.ServiceAccountName
	case c.cfg.DefaultServiceAccount != "":
		return c.cfg.DefaultServiceAccount
	case c.isTenant(ml):
		return "default"
	}
	return ""
}

// recordManifestDrifts adds the objects the lock created to its
// inventory, and reports the rest of res's drifts as a HelmRelease's are.
// Creating what the manifest names and the cluster lacked, and changing an
// object to a new manifest (see engine.Drift.Applying), is the lock
// applying its manifest, not drift.
func (c *Controller) recordManifestDrifts(ctx context.Context, ml *mlv1.ManifestLock, st *manifestState, res engine.Result) {
	drifts := res.Drifts[:0:0]
	for _, d := range res.Drifts {
		ref := mlv1.ObjectRef{APIVersion: d.Ref.GVR.GroupVersion().String(), Kind: d.Kind, Namespace: d.Ref.Namespace, Name: d.Ref.Name}
		created := d.Deleted && st.missing[ref]
		if created && d.Corrected {
			delete(st.missing, ref)
			if !slices.Contains(st.inventory, ref) {
				st.inventory = append(st.inventory, ref)
			}
		}
		if !created && !d.Applying {
			drifts = append(drifts, d)
		}
	}
	res.Drifts = drifts
	c.reportDrifts(ctx, nil, &st.bookkeeping, res)
	c.flushEvents(manifestLockRef(ml), &st.bookkeeping)
}

// openManifestLock opens the lock and lets go of its objects: another lock
// that declares one of them takes it over.
func (c *Controller) openManifestLock(key lockKey, st *manifestState) {
	c.open(key)
	st.opened()
}

// pauseManifestLock opens a suspended lock and keeps its objects (see
// engine.Pause): spec.suspend says to leave them alone, and another lock
// that declares one of them stays in Conflict rather than write it.
func (c *Controller) pauseManifestLock(key lockKey, st *manifestState) {
	c.engine.Pause(key.String())
	st.opened()
}

// opened forgets the declaration: the next sync declares the manifest
// again.
func (st *manifestState) opened() {
	st.lock = st.lock.Next(lock.Event{Type: lock.Open})
	st.declared, st.missing, st.unheld = "", nil, nil
}

// manifestError reports a manifest that cannot be read or held. What the
// lock held before stays held, and synced: a broken edit of the manifest,
// or a source deleted, must not leave its objects open to drift.
func (c *Controller) manifestError(ctx context.Context, req *manifestSync, reason, message string) (mlv1.ManifestLockStatus, error) {
	ml := req.ml
	if req.st.declared == "" {
		c.openManifestLock(req.key, req.st)
		return manifestOpenStatus(ml, mlv1.StateError, reason, message), nil
	}
	s, err := c.syncManifestObjects(ctx, req, nil)
	s.State = mlv1.StateError
	setConditions(&s.LockStatus, ml.Generation, condition(v1alpha1.ConditionReady, false, reason, message+"; the objects of the last manifest read stay held"))
	return s, err
}

func manifestLockRef(ml *mlv1.ManifestLock) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: mlv1.SchemeGroupVersion.String(), Kind: mlv1.Kind, Namespace: ml.Namespace, Name: ml.Name, UID: ml.UID}
}

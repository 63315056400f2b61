package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/lock"
)

var secretsResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// byRelease indexes CRs and release Secrets by release namespace/name.
const byRelease = "byRelease"

// Config is what a Controller needs. Clients must not throttle harder than
// the caller wants the locker to react.
type Config struct {
	// Namespace is the registration namespace whose HelmRelease CRs are
	// served.
	Namespace string
	// ControllerName is written into, and matched against, the
	// helmreleases.cattle.io/managed-by annotation.
	ControllerName string
	// HelmManagers are the field managers Helm writes with ("helm" unless
	// the binary is renamed). A locked object they changed after the lock
	// engaged makes the locker confirm the release is still deployed
	// before it writes.
	HelmManagers []string
	Dynamic      dynamic.Interface
	// REST, if set, is what the lock's informers watch with, so that
	// objects no release holds are never decoded.
	REST     *rest.Config
	Metadata metadata.Interface
	Kube     kubernetes.Interface
	Mapper   meta.ResettableRESTMapper
	// DefaultServiceAccount, in each release's namespace, is what the
	// writes of a CR that names no spec.serviceAccountName impersonate;
	// empty writes those with the locker's own identity.
	DefaultServiceAccount string
	// TenantManifestLocks makes the controller serve ManifestLocks in
	// every namespace, not only the registration namespace's.
	TenantManifestLocks bool
	// Workers is the number of releases synced at once.
	Workers int
	// ReadOnly makes a controller for a replica standing by: it reads
	// the CRs and releases and declares them to its engine, so that it
	// answers admission from the same declarations as the leader (see
	// Judge), and it writes nothing: no claim, status, event,
	// correction or prune.
	ReadOnly bool
	// HelmOperationTimeout is how long a revision may stay pending or
	// uninstalling before the lock holds the last verified revision again
	// (see stuck); DefaultHelmOperationTimeout if zero.
	HelmOperationTimeout time.Duration
	// Recorder records events on HelmRelease CRs; nil records none.
	Recorder record.EventRecorder
	// Metrics, if set, receives the lock's figures.
	Metrics *metrics.Metrics
	// Readiness is what the informers wait on after the API server was
	// unavailable, so that they watch again as soon as it is ready (see
	// informers.Guard). Nil asks REST's API server, if REST is set.
	Readiness informers.Readiness
}

// Controller locks the releases that HelmRelease CRs name.
type Controller struct {
	cfg     Config
	engine  *engine.Engine
	queue   workqueue.TypedRateLimitingInterface[string]
	crs     cache.SharedIndexInformer
	secrets cache.SharedIndexInformer
	// locks are the ManifestLocks of every namespace, and sources the
	// ConfigMaps and Secrets they read their manifests from.
	locks   cache.SharedIndexInformer
	sources *sourceWatches
	mls     manifestLocks
	// crsHealth and secretsHealth say whether the CR and Secret caches
	// see changes as they happen (see informers.Health).
	crsHealth, secretsHealth, locksHealth *informers.Health

	// denials are the last requests Prevent mode denied, by key.
	denials denials

	mu     sync.Mutex
	states map[string]*releaseState // by CR key
	synced atomic.Bool

	writersMu sync.Mutex
	writers   map[string]dynamic.Interface // by impersonated user
}

// releaseState is what the controller remembers of one CR between syncs.
// Only the worker syncing the CR's key touches it.
type releaseState struct {
	release v1alpha1.ReleaseKey
	held
	bookkeeping
	verifying
	// own are this controller's writes to the CR that its cache may not
	// show yet.
	own ownWrites
}

// held is what the lock holds: its state, and the revision declared to the
// engine.
type held struct {
	lock lock.Lock
	// rel is the decoded revision the lock holds, read from the Secret
	// with secretUID at secretVersion.
	rel           *storage.Release
	secretUID     types.UID
	secretVersion string
	// generation is the CR generation whose spec was declared.
	generation int64
	// optedOut are the manifest's objects left out of the lock.
	optedOut []v1alpha1.ObjectProblem
	// stuck, if set, is the Helm operation that outlasted the timeout;
	// the lock holds the last verified revision meanwhile.
	stuck *stuckRevision
}

// bookkeeping is what the lock has reported, and what waits to be.
type bookkeeping struct {
	// fights maps each object held back by a fight to the end of the
	// hold last reported, so each hold is reported once.
	fights map[engine.ObjectRef]time.Time
	// counted is set once the drift counts were read from the CR's
	// status; the controller keeps them from then on, since the cached
	// CR may not show its last status write yet.
	counted                   bool
	driftsDetected, corrected int64
	lastDrift                 *v1alpha1.Drift
	// pending are drift events held back, and flushAt when they and the
	// drift counts are written (zero when nothing waits); see
	// bookkeepingDelay.
	pending []pendingEvent
	flushAt time.Time
	// announced is the revision the Locked event was recorded for.
	announced int
	// unheld counts the events past maxPendingEvents, by type and reason.
	unheld map[pendingEvent]int
	// warned are the unverified objects warned about, by message, so
	// that each finding is announced once.
	warned map[string]bool
}

// verifying is what the lock trusts of the release's storage (see
// verification): the last verified revision, and the revision held while
// it is verified.
type verifying struct {
	trust     trust
	candidate *candidate
}

// bookkeepingDelay is how long drift events and status counts wait before
// they are written. A revert is one write; recording it is two more (an
// event and a status patch), and on a busy API server those would slow the
// reverts that follow. Held back a moment, a burst of drifts costs one
// status write per release, off the revert's path. Conditions are written
// at once.
const bookkeepingDelay = 2 * time.Second

// New builds a controller. It does no I/O; Run starts it.
func New(cfg Config) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.HelmOperationTimeout <= 0 {
		cfg.HelmOperationTimeout = DefaultHelmOperationTimeout
	}
	c := &Controller{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 2*time.Minute),
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "helmreleases", MetricsProvider: cfg.Metrics.WorkqueueProvider()},
		),
		states:  map[string]*releaseState{},
		writers: map[string]dynamic.Interface{},
	}
	if c.cfg.Recorder == nil {
		c.cfg.Recorder = noEvents{}
	}
	if c.cfg.Readiness == nil && cfg.REST != nil {
		// Building a client does no I/O; a config it cannot use fails
		// every other client too.
		if probe, err := informers.NewProbeForConfig(cfg.REST); err == nil {
			c.cfg.Readiness = probe
		}
	}
	engineOpts := engine.Options{Config: cfg.REST, Readiness: c.cfg.Readiness}
	if cfg.REST != nil && cfg.Kube != nil {
		// Merge rules are the API server's own, from its OpenAPI v3.
		engineOpts.OpenAPI = openapi.ToClientWithContext(cfg.Kube.Discovery().OpenAPIV3())
	}
	c.engine = engine.New(cfg.Dynamic, cfg.Mapper, c.queue.Add, engineOpts)

	// A change of either cache's health changes what every CR may claim.
	c.crsHealth = informers.NewHealth(func(bool) { c.enqueueAll() })
	c.locksHealth = informers.NewHealth(func(bool) { c.enqueueAll() })
	c.secretsHealth = informers.NewHealth(func(bool) { c.enqueueAll() })
	watchDynamic, watchMetadata := cfg.Dynamic, cfg.Metadata
	if cfg.REST != nil {
		// Guard, not client-go, paces retries (see
		// informers.WatchConfig). Building clients does no I/O, and a
		// config they cannot use fails the others too.
		if d, err := dynamic.NewForConfig(informers.WatchConfig(cfg.REST)); err == nil {
			watchDynamic = d
		}
		if m, err := metadata.NewForConfig(informers.WatchConfig(cfg.REST)); err == nil {
			watchMetadata = m
		}
	}
	c.crs = c.crInformer(watchDynamic, watchDynamic.Resource(v1alpha1.Resource).Namespace(cfg.Namespace), c.crsHealth,
		cache.Indexers{byRelease: crReleaseIndex}, v1alpha1.Resource.String())
	_ = c.crs.SetTransform(compact[v1alpha1.HelmRelease])
	_, _ = c.crs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueCR,
		UpdateFunc: func(_, obj any) { c.enqueueCR(obj) },
		// A CR that goes may leave its release to another.
		DeleteFunc: c.enqueueReleaseCRs,
	})

	var locks dynamic.ResourceInterface = watchDynamic.Resource(mlv1.Resource)
	if !cfg.TenantManifestLocks {
		locks = watchDynamic.Resource(mlv1.Resource).Namespace(cfg.Namespace)
	}
	c.locks = c.crInformer(watchDynamic, locks, c.locksHealth, nil, mlv1.Resource.String())
	_ = c.locks.SetTransform(compact[mlv1.ManifestLock])
	_, _ = c.locks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueManifestLock,
		UpdateFunc: func(_, obj any) { c.enqueueManifestLock(obj) },
		DeleteFunc: c.enqueueManifestLock,
	})
	c.sources = &sourceWatches{kube: cfg.Kube, enqueue: c.queue.Add}

	// Release Secrets are watched as metadata only, selected by Helm's
	// owner label: their labels carry the status and revision, and the
	// payload is read only for the revision being locked.
	secrets := watchMetadata.Resource(secretsResource)
	c.secrets = cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(informers.Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = storage.OwnedSelector
				return secrets.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = storage.OwnedSelector
				return secrets.Watch(ctx, o)
			},
		}, c.cfg.Readiness, c.secretsHealth), watchMetadata),
		&metav1.PartialObjectMetadata{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{byRelease: secretReleaseIndex}, ObjectDescription: "release Secrets"})
	_ = c.secrets.SetTransform(keepLastWrite)
	_, _ = c.secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueForSecret,
		UpdateFunc: func(_, obj any) { c.enqueueForSecret(obj) },
		DeleteFunc: c.enqueueForSecret,
	})
	return c
}

// keepLastWrite drops a release Secret's managedFields but for the time of
// its last write, which stuckOn counts the Helm operation timeout from: an
// old revision Helm marks uninstalling was written now, not when it was
// created.
func keepLastWrite(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	last := storage.LastWrite(m)
	m.ManagedFields = nil
	if last.After(m.CreationTimestamp.Time) {
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Time: &metav1.Time{Time: last}}}
	}
	return m, nil
}

// Run starts the informers and workers and blocks until ctx is done. It then
// stops everything it started and waits for it.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		c.queue.ShutDown()
		wg.Wait()
	}()
	start := func(run func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	start(c.crs.RunWithContext)
	start(c.secrets.RunWithContext)
	start(c.locks.RunWithContext)
	start(c.sources.run)
	logger.Info("Waiting for caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.crs.HasSynced, c.secrets.HasSynced, c.locks.HasSynced) {
		return errors.New("caches did not sync before shutdown")
	}
	c.declareAll(ctx)
	if c.cfg.ReadOnly {
		// A replica standing by judges requests against declarations
		// alone: it watches no locked object.
		c.synced.Store(true)
	} else {
		c.runEngine(ctx, start)
	}
	logger.Info("Starting workers", "count", c.cfg.Workers)
	for range c.cfg.Workers {
		start(func(ctx context.Context) {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	logger.Info("Shutting down")
	return nil
}

// runEngine starts the engine and its informers, and marks the controller
// synced once they have listed.
func (c *Controller) runEngine(ctx context.Context, start func(func(context.Context))) {
	logger := klog.FromContext(ctx)
	start(func(ctx context.Context) { _ = c.engine.Run(ctx) })
	start(func(ctx context.Context) {
		// The first lists decode every object of every watched type,
		// most of which the cache then drops (see informers.Stub).
		// Hand that memory back now rather than over the next minutes.
		if !c.engine.WaitForSynced(ctx) {
			return
		}
		debug.FreeOSMemory()
		c.synced.Store(true)
		logger.V(2).Info("Informers synced")
		// The first sync of every release reads its Secret and
		// checks its objects; that garbage goes back too once the
		// queue has been empty for a second.
		for quiet := 0; quiet < 5; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if c.queue.Len() == 0 {
				quiet++
			} else {
				quiet = 0
			}
		}
		debug.FreeOSMemory()
		logger.V(2).Info("Initial syncs done")
	})
}

// Synced reports whether every cache has finished its first list.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watching reports whether every cache sees changes as they happen, and if
// not, which: the readiness of a leading replica, which cannot hold what it
// cannot see.
func (c *Controller) Watching() (bool, string) {
	var blind []string
	if !c.crsHealth.Current() {
		blind = append(blind, v1alpha1.Resource.String())
	}
	if !c.secretsHealth.Current() {
		blind = append(blind, "release Secrets")
	}
	if !c.locksHealth.Current() {
		blind = append(blind, mlv1.Resource.String())
	}
	for _, gvr := range c.engine.Unwatched() {
		blind = append(blind, gvr.String())
	}
	if len(blind) == 0 {
		return true, ""
	}
	return false, "watches not current: " + strings.Join(blind, ", ")
}

// enqueueAll queues every CR, when what all of them may report changed.
func (c *Controller) enqueueAll() {
	for _, key := range c.crs.GetIndexer().ListKeys() {
		c.queue.Add(key)
	}
	for _, key := range c.locks.GetIndexer().ListKeys() {
		c.queue.Add(manifestLockPrefix + key)
	}
}

// Informers lists the resource types watched now, for metrics.
func (c *Controller) Informers() []schema.GroupVersionResource {
	return c.engine.Watched()
}

// declareAll declares the objects of every registered, deployed release
// before the engine starts its informers. Each informer's first list then
// finds the objects it must keep whole already tracked, and the first sync
// of every release reads them from the cache instead of one GET each.
func (c *Controller) declareAll(ctx context.Context) {
	keys := make(chan string)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for key := range keys {
				err := recovered(ctx, key, func() error {
					hr, st, ok := c.observe(ctx, key)
					if !ok {
						return nil
					}
					_, _, err := c.decide(ctx, key, hr, st, &result{})
					return err
				})
				if err != nil {
					klog.FromContext(ctx).V(2).Info("Could not declare release at startup; the first sync retries", "helmRelease", key, "err", err)
				}
			}
		})
	}
	for _, key := range c.crs.GetIndexer().ListKeys() {
		keys <- key
	}
	close(keys)
	wg.Wait()
	c.engine.Prepare(ctx)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.FromContext(ctx).WithValues("helmRelease", key)
	if ref, ok := strings.CutPrefix(key, manifestLockPrefix); ok {
		logger = klog.FromContext(ctx).WithValues("manifestLock", ref)
	}
	ctx = klog.NewContext(ctx, logger)
	var res result
	err := recovered(ctx, key, func() (err error) {
		res, err = c.sync(ctx, key)
		return err
	})
	if err != nil {
		logger.V(2).Info("Sync failed, retrying", "err", err, "retries", c.queue.NumRequeues(key))
		if ns, name, splitErr := cache.SplitMetaNamespaceKey(key); splitErr == nil && !strings.HasPrefix(key, manifestLockPrefix) {
			c.cfg.Metrics.ReconcileError(ns, name)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if res.requeueAfter > 0 {
		c.queue.AddAfter(key, res.requeueAfter)
	}
	return true
}

// result is what one sync asks of the loop that owns the queue.
type result struct {
	// requeueAfter, when not zero, is when to sync the key again.
	requeueAfter time.Duration
}

// requeueBy makes the key sync again within d at the latest.
func (r *result) requeueBy(d time.Duration) {
	if d > 0 && (r.requeueAfter == 0 || d < r.requeueAfter) {
		r.requeueAfter = d
	}
}

// recovered turns a panic in f, while it works on key, into an error for
// that key, retried with backoff, so one bad lock cannot take the process
// and every other lock down with it.
func recovered(ctx context.Context, key string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic while syncing %s: %v", key, r)
			klog.FromContext(ctx).Error(err, "Recovered; it will be retried", "stack", string(debug.Stack()))
		}
	}()
	return f()
}

func (c *Controller) enqueueCR(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// enqueueReleaseCRs queues a deleted CR and every CR naming its release.
func (c *Controller) enqueueReleaseCRs(obj any) {
	c.enqueueCR(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if keys, err := crReleaseIndex(obj); err == nil && len(keys) > 0 {
		c.enqueueRelease(keys[0])
	}
}

// enqueueRelease queues every CR that names the release namespace/name.
func (c *Controller) enqueueRelease(release string) {
	crs, err := c.crs.GetIndexer().ByIndex(byRelease, release)
	if err != nil {
		return
	}
	for _, cr := range crs {
		c.enqueueCR(cr)
	}
}

// lockedElsewhere returns the name of another HelmRelease of this
// controller that names the same release and came first, if any: one
// release has one lock, or two CRs would report, and write, for it twice.
// The oldest CR holds it; a tie goes to the first name.
func (c *Controller) lockedElsewhere(hr *v1alpha1.HelmRelease) string {
	crs, err := c.crs.GetIndexer().ByIndex(byRelease, hr.Spec.Release.Namespace+"/"+hr.Spec.Release.Name)
	if err != nil {
		return ""
	}
	// first reports whether a CR created at t named a came before one
	// created at u named b.
	first := func(t metav1.Time, a string, u metav1.Time, b string) bool {
		return t.Before(&u) || (t.Equal(&u) && a < b)
	}
	holder, heldSince := "", metav1.Time{}
	for _, obj := range crs {
		other, err := meta.Accessor(obj)
		if err != nil || other.GetName() == hr.Name {
			continue
		}
		if owner := other.GetAnnotations()[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
			continue
		}
		created, name := other.GetCreationTimestamp(), other.GetName()
		if first(created, name, hr.CreationTimestamp, hr.Name) && (holder == "" || first(created, name, heldSince, holder)) {
			holder, heldSince = name, created
		}
	}
	return holder
}

// enqueueForSecret queues every CR that names the Secret's release.
func (c *Controller) enqueueForSecret(obj any) {
	if keys, err := secretReleaseIndex(obj); err == nil && len(keys) > 0 {
		c.enqueueRelease(keys[0])
	}
}

func crReleaseIndex(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *v1alpha1.HelmRelease:
		return []string{o.Spec.Release.Namespace + "/" + o.Spec.Release.Name}, nil
	case *unstructured.Unstructured:
		name, _, _ := unstructured.NestedString(o.Object, "spec", "release", "name")
		ns, _, _ := unstructured.NestedString(o.Object, "spec", "release", "namespace")
		return []string{ns + "/" + name}, nil
	}
	return nil, nil
}

// crInformer is an informer of the CRs r lists, paced by informers.Guard,
// which reports whether it sees changes as they happen to health.
func (c *Controller) crInformer(client dynamic.Interface, r dynamic.ResourceInterface, health *informers.Health, indexers cache.Indexers, desc string) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(informers.Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return r.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return r.Watch(ctx, o)
			},
		}, c.cfg.Readiness, health), client),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{Indexers: indexers, ObjectDescription: desc})
}

// compact is what the CR caches keep of a HelmRelease or a ManifestLock:
// the typed object without its managedFields. As nested maps, a
// HelmRelease with its status and the managedFields of the status writes
// took about 17 KB; each release paid that. An object that does not
// convert (the CRD's schema makes that unreachable) is kept as it came,
// for sync to report.
func compact[T any, P interface {
	*T
	metav1.Object
}](obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	typed := P(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return obj, nil
	}
	typed.SetManagedFields(nil)
	return typed, nil
}

func secretReleaseIndex(obj any) ([]string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	name := m.GetLabels()[storage.LabelName]
	if name == "" {
		return nil, nil
	}
	return []string{m.GetNamespace() + "/" + name}, nil
}

// sync brings the lock of one key in line: a HelmRelease CR's, or a
// ManifestLock's. The loop that calls it owns the queue.
func (c *Controller) sync(ctx context.Context, key string) (result, error) {
	if strings.HasPrefix(key, manifestLockPrefix) {
		return c.syncManifestLock(ctx, key)
	}
	hr, st, ok := c.observe(ctx, key)
	if !ok {
		return result{}, nil
	}
	if c.cfg.ReadOnly {
		held := st.rel
		_, _, err := c.decide(ctx, key, hr, st, &result{})
		if st.rel != held {
			// A new declaration: its kinds' rules, for Judge.
			c.engine.Prepare(ctx)
		}
		return result{}, err
	}
	if hr.Annotations[v1alpha1.ManagedByAnnotation] == "" {
		rv, err := c.claim(ctx, hr)
		if err != nil {
			return result{}, err
		}
		st.own.claimed(hr, c.cfg.ControllerName, rv)
	}
	before := st.lock
	var res result
	status, open, err := c.decide(ctx, key, hr, st, &res)
	if err != nil {
		return result{}, err
	}
	awaiting := false
	var syncErr error
	if !open {
		status, awaiting, syncErr = c.act(ctx, key, hr, st, &res)
	}
	return c.report(ctx, key, hr, st, before, status, awaiting, syncErr, res)
}

// observe reads key's HelmRelease from the cache and its state, and
// reports false when there is nothing to hold: the CR is gone or another
// locker serves it, and the lock is opened and forgotten.
func (c *Controller) observe(ctx context.Context, key string) (*v1alpha1.HelmRelease, *releaseState, bool) {
	obj, exists, err := c.crs.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		c.open(key)
		c.dropState(key)
		return nil, nil, false
	}
	hr, ok := obj.(*v1alpha1.HelmRelease)
	if !ok {
		hr = &v1alpha1.HelmRelease{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, hr); err != nil {
			// The CRD's schema makes this unreachable for CRs it admitted.
			klog.FromContext(ctx).Error(err, "Cannot read HelmRelease; ignoring it")
			return nil, nil, false
		}
	} else {
		hr = hr.DeepCopy()
	}
	if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != "" && owner != c.cfg.ControllerName {
		// Another locker serves it.
		c.open(key)
		c.dropState(key)
		return nil, nil, false
	}
	st := c.state(key)
	if st.release != hr.Spec.Release {
		c.open(key)
		*st = releaseState{release: hr.Spec.Release}
	}
	st.own.apply(hr)
	if !st.counted {
		st.counted = true
		st.driftsDetected, st.corrected, st.lastDrift = hr.Status.DriftsDetected, hr.Status.DriftsCorrected, hr.Status.LastDrift.DeepCopy()
		if v := hr.Status.Verified; v != nil && v.Release == hr.Spec.Release {
			record := *v
			st.trust.verified = &record
		}
	}
	return hr, st, true
}

// report writes what a sync found: events, metrics and the status, which
// waits, with the drift bookkeeping, while only the counts changed or the
// lock awaits its own corrections (see bookkeepingDelay).
func (c *Controller) report(ctx context.Context, key string, hr *v1alpha1.HelmRelease, st *releaseState, before lock.Lock, status v1alpha1.HelmReleaseStatus, awaiting bool, syncErr error, res result) (result, error) {
	status.DriftsDetected, status.DriftsCorrected = st.driftsDetected, st.corrected
	if st.lastDrift != nil {
		status.LastDrift = st.lastDrift
	}
	status.LastDenied = c.denials.get(key, hr.Status.LastDenied)
	if st.trust.verified != nil {
		status.Verified = st.trust.verified
	}
	c.lockEvents(hr, before, st, status)
	c.cfg.Metrics.ObserveRelease(key, st.lock.Phase == lock.Locked, status.LockedObjects)
	// While the lock awaits only its own corrections, the status it
	// would write now (Reconciling) would be overwritten a moment later,
	// so it waits like the bookkeeping does.
	wait := awaiting || onlyBookkeeping(hr.Status, status)
	if wait || len(st.pending) > 0 {
		now := time.Now()
		if st.flushAt.IsZero() {
			st.flushAt = now.Add(bookkeepingDelay)
		}
		if now.Before(st.flushAt) && wait {
			res.requeueBy(st.flushAt.Sub(now))
			return res, syncErr
		}
	}
	wrote, err := c.writeStatus(ctx, hr, status)
	if err != nil {
		return res, errors.Join(syncErr, err)
	}
	if wrote {
		st.own.wroteStatus(hr, status)
	}
	c.flushEvents(crRef(hr), &st.bookkeeping)
	st.flushAt = time.Time{}
	return res, syncErr
}

// onlyBookkeeping reports whether next differs from the written status in
// the drift record and counts alone, which may wait (see bookkeepingDelay).
func onlyBookkeeping(written, next v1alpha1.HelmReleaseStatus) bool {
	n := *next.DeepCopy()
	n.LastDrift, n.DriftsDetected, n.DriftsCorrected = written.LastDrift, written.DriftsDetected, written.DriftsCorrected
	return !sameStatus(written, next) && sameStatus(written, n)
}

// decide reads the release's storage and decides the lock: open, with the
// status saying why (open is true), or held, its revision declared to the
// engine. It writes nothing; an error is to retry on.
func (c *Controller) decide(ctx context.Context, key string, hr *v1alpha1.HelmRelease, st *releaseState, r *result) (status v1alpha1.HelmReleaseStatus, open bool, err error) {
	logger := klog.FromContext(ctx)
	rk := hr.Spec.Release
	if rk.Name == "" || rk.Namespace == "" {
		c.openState(key, st)
		return openStatus(hr, v1alpha1.StateError, 0, "InvalidSpec", "spec.release.name and spec.release.namespace must both be set"), true, nil
	}
	if holder := c.lockedElsewhere(hr); holder != "" {
		c.openState(key, st)
		return openStatus(hr, v1alpha1.StateError, 0, "Conflict",
			fmt.Sprintf("release %s/%s is already locked by HelmRelease %s/%s; this one holds nothing until that one is deleted", rk.Namespace, rk.Name, hr.Namespace, holder)), true, nil
	}
	if hr.Spec.Suspend {
		c.openState(key, st)
		return openStatus(hr, v1alpha1.StateSuspended, hr.Status.Version, "Suspended", "spec.suspend is true: the lock is open and nothing is reverted"), true, nil
	}
	ignore, err := declare.Ignore(hr.Spec.Ignore)
	if err != nil {
		c.openState(key, st)
		return openStatus(hr, v1alpha1.StateError, 0, "InvalidSpec", err.Error()), true, nil
	}
	latest := c.latestSecret(rk)
	if latest == nil {
		c.openState(key, st)
		status, err := c.noSecretStatus(ctx, hr)
		return status, true, err
	}
	revision, _ := storage.Revision(latest)
	decision := storage.Decide(latest.GetLabels()[storage.LabelStatus])
	st.stuck = nil
	if !decision.Engage {
		verified := c.stuckOn(st, latest, time.Now(), r)
		if verified == nil {
			if st.lock.Phase != lock.Unlocked && st.lock.Phase != "" {
				logger.V(2).Info("Lock opened", "release", rk.Namespace+"/"+rk.Name, "revision", revision, "reason", decision.Reason)
			}
			c.openState(key, st)
			return openStatus(hr, decision.State, revision, decision.Reason, decision.Message), true, nil
		}
		st.stuck = &stuckRevision{revision: revision, status: latest.GetLabels()[storage.LabelStatus], since: storage.LastWrite(latest)}
		latest, revision = verified, st.trust.verified.Revision
	}

	if st.rel == nil || st.secretUID != latest.GetUID() || st.secretVersion != latest.GetResourceVersion() || st.generation != hr.Generation {
		rel, objs, err := c.readRelease(ctx, latest)
		if err != nil {
			c.openState(key, st)
			if apierrors.IsNotFound(err) {
				return hr.Status, true, err // the informer will catch up
			}
			return openStatus(hr, v1alpha1.StateError, revision, "InvalidRelease", err.Error()), true, nil
		}
		writer, err := c.writerFor(rk.Namespace, c.serviceAccount(hr))
		if err != nil {
			c.openState(key, st)
			return openStatus(hr, v1alpha1.StateError, revision, "ImpersonationUnavailable", err.Error()), true, nil
		}
		verify := c.verification(ctx, st, latest, rel, objs)
		objs, st.optedOut = declare.SplitOptedOut(objs)
		st.lock = st.lock.Next(lock.Event{Type: lock.Engage, Revision: rel.Version, Warn: hr.Spec.Mode == v1alpha1.ModeWarn})
		c.engine.Declare(key, engine.ObjectSet{
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
		// The engine holds the parsed objects; the manifest text
		// would only double them.
		rel.Manifest = ""
		st.rel, st.secretUID, st.secretVersion, st.generation = rel, latest.GetUID(), latest.GetResourceVersion(), hr.Generation
		logger.V(2).Info("Lock engaged", "release", rk.Namespace+"/"+rk.Name, "revision", rel.Version, "objects", len(objs), "mode", hr.Spec.Mode)
	}
	return hr.Status, false, nil
}

// act syncs the engine with the declared revision and builds the status
// to report. It also returns whether the lock awaits only the watch events
// of its own corrections (see awaitingOwnWrites), and an error to retry on.
func (c *Controller) act(ctx context.Context, key string, hr *v1alpha1.HelmRelease, st *releaseState, r *result) (v1alpha1.HelmReleaseStatus, bool, error) {
	logger := klog.FromContext(ctx)
	res, err := c.engine.Sync(ctx, key)
	// Without current CR and Secret caches, an upgrade that opens the
	// lock, or a new CR spec, can go unseen.
	if !c.crsHealth.Current() {
		res.Unwatched, res.InLine = append(res.Unwatched, v1alpha1.Resource), false
	}
	if !c.secretsHealth.Current() {
		res.Unwatched, res.InLine = append(res.Unwatched, secretsResource), false
	}
	before := st.lock
	complete := err == nil && len(res.Unresolved) == 0 && len(res.Unverified) == 0 && len(res.Failed) == 0
	st.lock = st.lock.Next(lock.Event{Type: lock.Checked, Revision: st.rel.Version, Complete: complete, InLine: res.InLine})
	if st.lock != before {
		logger.V(2).Info("Lock state changed", "from", before.Phase, "to", st.lock.Phase, "revision", st.lock.Revision)
	}
	if err == nil && len(res.Unresolved) == 0 && len(res.Unverified) == 0 {
		st.verified()
	}
	c.reportDrifts(ctx, &hr.Spec.Release, &st.bookkeeping, res)
	c.reportUnverified(hr, st, res)
	r.requeueBy(res.RequeueAfter)
	status := lockedStatus(hr, st, res, err)
	if s := st.stuck; s != nil {
		setConditions(&status.LockStatus, hr.Generation, condition(v1alpha1.ConditionReady, false, "HelmOperationStuck", s.message(c.cfg.HelmOperationTimeout, st.rel.Version)))
	}
	if err == nil && len(res.Unresolved) > 0 {
		// CRD events retry these at once; backing off covers a
		// discovery that lags behind the CRD.
		err = errors.Join(res.Unresolved...)
	}
	return status, err == nil && awaitingOwnWrites(res), err
}

// awaitingOwnWrites reports whether the objects of res that are not in line
// are all ones this Sync corrected, so the lock settles as soon as the
// watch shows those writes.
func awaitingOwnWrites(res engine.Result) bool {
	corrected := 0
	for _, d := range res.Drifts {
		if d.Corrected && d.Err == nil {
			corrected++
		}
	}
	return !res.InLine && corrected > 0 && res.Drifted == 0 && len(res.Fights) == 0 &&
		len(res.Unresolved) == 0 && len(res.Unwatched) == 0 && res.Locked+corrected == res.Objects
}

// open stops holding key's objects, leaving them as they are.
func (c *Controller) open(key string) { c.engine.Forget(key) }

// openState opens the lock: it holds nothing, and what it reported of the
// held revision (fights, warnings) and the revision it was verifying go.
func (c *Controller) openState(key string, st *releaseState) {
	c.open(key)
	st.held = held{lock: st.lock.Next(lock.Event{Type: lock.Open})}
	st.fights, st.warned = nil, nil
	st.candidate = nil
}

func (c *Controller) state(key string) *releaseState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[key]
	if st == nil {
		st = &releaseState{}
		c.states[key] = st
	}
	return st
}

func (c *Controller) dropState(key string) {
	c.cfg.Metrics.ForgetRelease(key)
	c.denials.drop(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.states, key)
}

// latestSecret returns the metadata of the release's highest revision.
func (c *Controller) latestSecret(rk v1alpha1.ReleaseKey) *metav1.PartialObjectMetadata {
	objs, err := c.secrets.GetIndexer().ByIndex(byRelease, rk.Namespace+"/"+rk.Name)
	if err != nil {
		return nil
	}
	var metas []*metav1.PartialObjectMetadata
	for _, obj := range objs {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			metas = append(metas, m)
		}
	}
	latest, _ := storage.Latest(metas)
	return latest
}

// readRelease reads and decodes the release Secret and parses its manifest.
func (c *Controller) readRelease(ctx context.Context, latest *metav1.PartialObjectMetadata) (*storage.Release, []*unstructured.Unstructured, error) {
	secret, err := c.cfg.Kube.CoreV1().Secrets(latest.Namespace).Get(ctx, latest.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	rel, err := storage.Read(secret)
	if err != nil {
		return nil, nil, err
	}
	objs, err := rel.Objects()
	if err != nil {
		return nil, nil, err
	}
	return rel, objs, nil
}

// noSecretStatus reports a release with no Secrets. The lock is open and
// nothing is deleted. If Helm's ConfigMap driver holds the release, it says
// so, since that driver is not supported.
func (c *Controller) noSecretStatus(ctx context.Context, hr *v1alpha1.HelmRelease) (v1alpha1.HelmReleaseStatus, error) {
	rk := hr.Spec.Release
	cms, err := c.cfg.Kube.CoreV1().ConfigMaps(rk.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: storage.Selector(rk.Name),
		Limit:         1,
	})
	if err == nil && len(cms.Items) > 0 {
		return openStatus(hr, v1alpha1.StateError, 0, "UnsupportedStorageDriver",
			fmt.Sprintf("release %s/%s is stored in ConfigMaps (HELM_DRIVER=configmap); only Helm's default Secret driver is supported", rk.Namespace, rk.Name)), nil
	}
	return openStatus(hr, v1alpha1.StateSecretNotFound, 0, "SecretNotFound",
		fmt.Sprintf("no Secret of type %s holds release %s/%s; nothing is held and nothing is deleted", storage.SecretType, rk.Namespace, rk.Name)), nil
}

// claim writes this controller's name into the managed-by annotation.
// It returns the resourceVersion the claim made.
func (c *Controller) claim(ctx context.Context, hr *v1alpha1.HelmRelease) (string, error) {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ManagedByAnnotation, c.cfg.ControllerName)
	claimed, err := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace(hr.Namespace).Patch(ctx, hr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("claiming HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	return claimed.GetResourceVersion(), nil
}

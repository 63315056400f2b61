package controller

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"github.com/helm-locker/helm-locker/engine/worker"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/registry"
	"github.com/helm-locker/helm-locker/internal/twoway"
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
	// Selector, if not empty, selects the HelmRelease and ManifestLock
	// CRs served: one shard's. The API server filters the CR watches by
	// it, so a shard never sees another's CRs, and a CR relabelled out
	// of it is, to this controller, deleted: its lock opens and nothing
	// more is written to it or for it (see patchStatus). Release Secrets
	// and the engine's informers are not filtered.
	Selector labels.Selector
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
	// OpenAPI, if set, is where the engine reads each kind's merge rules;
	// nil reads the API server's OpenAPI v3 through Kube when REST is
	// set, and uses client-go's compiled rules otherwise.
	OpenAPI openapi.ClientWithContext
	// DefaultServiceAccount, in each release's namespace, is what the
	// writes of a CR that names no spec.serviceAccountName impersonate;
	// empty writes those with the locker's own identity.
	DefaultServiceAccount string
	// DefaultRerender is the spec.rerender of a HelmRelease that sets
	// none; empty is Off.
	DefaultRerender v1alpha1.Rerender
	// RerenderUpgradeInterval is the least time between two of Upgrade
	// mode's upgrades of a release, doubled while their cause keeps
	// changing (see throttle.Throttle.Allow), and
	// RerenderUpgradeMaxPerHour how many it makes of a release within
	// any hour; DefaultRerenderUpgradeInterval and
	// DefaultRerenderUpgradeMaxPerHour if zero. Each upgrade opens the
	// lock while Helm works: a lookup target flipped back and forth
	// must not keep it open.
	RerenderUpgradeInterval   time.Duration
	RerenderUpgradeMaxPerHour int
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
	// Admission, if set, says whether the API server reaches Prevent
	// mode's webhook, for ConditionAdmissionAnswered; nil with the
	// webhook off.
	Admission AdmissionProbe
	// ArtifactClient downloads the artifacts of ManifestLocks'
	// spec.sourceRef; nil uses http.DefaultClient. ArtifactLimits caps
	// each download, what it unpacks to, and the objects it builds.
	ArtifactClient *http.Client
	ArtifactLimits artifact.Limits
	// Renderer renders charts again, for spec.rerender: the operator's
	// runs each render in a process of its own, with a deadline and a
	// memory cap (internal/sandbox). Nil renders in this process
	// (render.Render), as unit tests do.
	Renderer Renderer
}

// Controller locks the releases that HelmRelease CRs name.
type Controller struct {
	cfg     Config
	engine  *engine.Engine
	queue   workqueue.TypedRateLimitingInterface[lockKey]
	crs     cache.SharedIndexInformer
	secrets cache.SharedIndexInformer
	// locks are the ManifestLocks of every namespace, and sources the
	// ConfigMaps and Secrets they read their manifests from.
	locks   cache.SharedIndexInformer
	sources *sourceWatches
	// chartSources watch the sources of HelmReleases' spec.chartRef,
	// and tell two-way locking when one changes.
	chartSources *sourceWatches
	// artifactBuilds holds a slot for each artifact being downloaded and
	// built (see buildArtifact).
	artifactBuilds chan struct{}
	// serviceAccounts, set only when tenants' locks are served, say
	// which locks each ServiceAccount lets write as it (see
	// serviceAccountInformer).
	serviceAccounts cache.SharedIndexInformer
	// mls and states are what the controller remembers of each
	// ManifestLock and HelmRelease between syncs.
	mls    registry.Map[lockKey, *manifestState]
	states registry.Map[lockKey, *releaseState]
	// crsHealth and secretsHealth say whether the CR and Secret caches
	// see changes as they happen (see informers.Health).
	crsHealth, secretsHealth, locksHealth *informers.Health

	// denials are the last requests Prevent mode denied, by key, from the
	// webhook's goroutines to the worker that writes the lock's status.
	denials registry.Map[lockKey, *v1alpha1.Denial]
	// sets maps the engine key of each set the controller declared back
	// to its lockKey (see declareSet).
	sets registry.Map[string, lockKey]

	synced atomic.Bool
	// readOnly is Config.ReadOnly until Promote turns it off; leading is
	// closed then (at once for a controller built to lead), and starts
	// what only a leader runs.
	readOnly atomic.Bool
	leading  chan struct{}

	writersMu sync.Mutex
	writers   map[string]dynamic.Interface // by impersonated user
	// sweep asks sweepWriters to prune writers, once a lock is deleted or
	// changes its writer.
	sweep chan struct{}

	// bookkeeping is the budget of status writes that carry only
	// bookkeeping (see bookkeepingRate).
	bookkeeping *rate.Limiter

	// arrivals gathers the HelmReleases first synced after the start,
	// to declare those that come together as a start does; declaredAll
	// says the start's own declaring (declareAll) is over, and what comes
	// after it is an arrival, whether or not the informers have listed.
	arrivals    *arrivals
	declaredAll atomic.Bool

	// prefetched holds the page of deployed release Secrets declareAll
	// listed, by namespace/name, for readRelease to take rather than GET.
	prefetched sync.Map

	// twoway renders locked releases again, for spec.rerender.
	twoway *twoway.Renders
	// unsettled counts the HelmReleases whose lock has not yet reported
	// a state other than Transitioning: renders wait until none is, so
	// that they take no CPU from a cold start's locks.
	unsettled atomic.Int64
}

// bookkeepingDelay is how long drift events and status counts wait before
// they are written. A revert is one write; recording it is two more (an
// event and a status patch), and on a busy API server those would slow the
// reverts that follow. Held back a moment, a burst of drifts costs one
// status write per release, off the revert's path. Conditions are written
// at once.
const bookkeepingDelay = 2 * time.Second

// maxBookkeepingDelay bounds how long drift that goes on holds its
// bookkeeping back (see nextFlush): a mass drift of a release's objects
// spread over seconds costs a status write every 10 s, not every 2.
const maxBookkeepingDelay = 10 * time.Second

// bookkeepingRate and bookkeepingBurst are the budget, shared by every
// release, of status writes that carry only bookkeeping: drift counts and
// the Reconciling that awaits the lock's own corrections. Someone who
// changes thousands of locked objects at once makes every release's
// bookkeeping due within seconds; written as it falls due, it took a
// quarter of the API server's writes, slowing the reverts that are the
// point. With the budget, releases take turns, first due first written,
// and a drift that goes on under that load is reported later than
// maxBookkeepingDelay. Conditions are not bookkeeping and never wait.
const (
	bookkeepingRate  = 20
	bookkeepingBurst = 20
)

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
				workqueue.NewTypedItemExponentialFailureRateLimiter[lockKey](50*time.Millisecond, 2*time.Minute),
			),
			workqueue.TypedRateLimitingQueueConfig[lockKey]{Name: "locks", MetricsProvider: cfg.Metrics.WorkqueueProvider()},
		),
		writers:     map[string]dynamic.Interface{},
		sweep:       make(chan struct{}, 1),
		bookkeeping: rate.NewLimiter(bookkeepingRate, bookkeepingBurst),
		arrivals:    newArrivals(),
		leading:     make(chan struct{}),
	}
	c.readOnly.Store(cfg.ReadOnly)
	if !cfg.ReadOnly {
		close(c.leading)
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
	c.newEngine()
	c.twoway = twoway.New(c.twoWayConfig(), c.engine, twoWayLocks{c})
	c.newHealth()
	watchDynamic, watchMetadata := c.watchClients()
	c.newCRInformers(watchDynamic)
	c.sources = &sourceWatches{kube: cfg.Kube, dynamic: cfg.Dynamic, mapper: cfg.Mapper, enqueue: c.queue.Add}
	c.chartSources = &sourceWatches{kube: cfg.Kube, dynamic: cfg.Dynamic, mapper: cfg.Mapper, enqueue: func(key lockKey) { c.twoway.ChartMoved(key.ObjectName) }}
	c.artifactBuilds = make(chan struct{}, artifactBuilds)
	if cfg.TenantManifestLocks && watchMetadata != nil {
		c.serviceAccounts = c.serviceAccountInformer(watchMetadata)
	}
	c.newSecretInformer(watchMetadata)
	return c
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
		c.twoway.ShutDown()
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
	start(c.chartSources.run)
	start(c.sweepWriters)
	if c.serviceAccounts != nil {
		// Not waited for: until it has listed, a tenant's lock reads
		// its ServiceAccount with a GET (see writerAnnotations).
		start(c.serviceAccounts.RunWithContext)
	}
	logger.Info("Waiting for caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.crs.HasSynced, c.secrets.HasSynced, c.locks.HasSynced) {
		return errors.New("caches did not sync before shutdown")
	}
	c.declareAll(ctx)
	c.declaredAll.Store(true)
	if c.readOnly.Load() {
		// A replica standing by judges requests against declarations
		// alone, from now on.
		c.synced.Store(true)
	}
	// A replica standing by watches the locked objects too, and keeps
	// its caches warm: promoted (see Promote), it corrects a drift at
	// once, with nothing to list.
	c.runEngine(ctx, start)
	start(func(ctx context.Context) { c.lead(ctx, start) })
	logger.Info("Starting workers", "count", c.cfg.Workers)
	start(c.admitArrivals)
	start(func(ctx context.Context) { worker.Run(ctx, c.queue, c.cfg.Workers, c.syncKey) })
	<-ctx.Done()
	logger.Info("Shutting down")
	return nil
}

// Promote makes a controller built ReadOnly, for a replica standing by,
// the leader's: from now on it writes (claims, statuses, corrections),
// runs what only a leader runs, and syncs every lock at once, from the
// caches and declarations it kept warm while it stood by. A replica that
// takes the Lease promotes its standby rather than start a controller
// with cold caches. It does nothing to a controller built to lead, or
// promoted already; it may be called before Run.
func (c *Controller) Promote() {
	if c.readOnly.CompareAndSwap(true, false) {
		close(c.leading)
	}
}

// ReadOnly reports whether the controller writes nothing: built ReadOnly,
// and not promoted.
func (c *Controller) ReadOnly() bool { return c.readOnly.Load() }

// lead runs, once the controller leads (see Promote), what only a leader
// runs: two-way locking and the admission probe's watch. A promoted
// controller then reads the failed upgrades the leader before it
// recorded, and syncs every lock as the leader.
func (c *Controller) lead(ctx context.Context, start func(func(context.Context))) {
	promoted := c.readOnly.Load()
	select {
	case <-c.leading:
	case <-ctx.Done():
		return
	}
	if c.cfg.Admission != nil {
		start(c.watchAdmission)
	}
	start(c.twoway.Run)
	if !promoted {
		return
	}
	klog.FromContext(ctx).Info("Promoted: leading with the caches kept while standing by")
	c.restoreFailedUpgrades()
	c.requeueAll()
}

// requeueAll queues every lock the CR caches hold.
func (c *Controller) requeueAll() {
	for _, obj := range c.crs.GetStore().List() {
		if key, ok := keyOf(v1alpha1.Kind, obj); ok {
			c.queue.Add(key)
		}
	}
	for _, obj := range c.locks.GetStore().List() {
		if key, ok := keyOf(mlv1.Kind, obj); ok {
			c.queue.Add(key)
		}
	}
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
		// checks its objects. Once the queue has been empty for a
		// second they are done; the binary hands their garbage back
		// when it goes quiet (cmd/helm-locker's handBack).
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
		logger.V(2).Info("Initial syncs done")
	})
}

// Synced reports whether every HelmRelease and ManifestLock in the CR
// caches has been declared once (see declareAll) and, on a leader, the
// engine's informers have finished their first list. From then on the
// declarations count every lock: PreventedTypes names every type a
// Prevent lock holds, and Judge answers for every lock. A lock whose
// manifest or release could not be read then is declared by its first
// sync, which retries it.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Watching reports whether every cache sees changes as they happen, and if
// not, which: the readiness of a leading replica, which cannot hold what it
// cannot see. A kind the locker may not read is left out: it is no outage.
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
		if apierrors.IsForbidden(c.engine.WatchError(gvr)) {
			// The locker's own RBAC does not let it read the kind (the
			// chart names the kinds it reads). That lasts, and each lock
			// that holds one says so (WatchForbidden); counted here it
			// would keep the leader unready as long, and with it hold
			// the PodDisruptionBudget against draining the other replica.
			continue
		}
		blind = append(blind, gvr.String())
	}
	if len(blind) == 0 {
		return true, ""
	}
	return false, "watches not current: " + strings.Join(blind, ", ")
}

// enqueueAll queues every CR, when what all of them may report changed.
func (c *Controller) enqueueAll() {
	for _, obj := range c.crs.GetStore().List() {
		c.enqueueCR(obj)
	}
	for _, obj := range c.locks.GetStore().List() {
		c.enqueueManifestLock(obj)
	}
}

// Informers lists the resource types watched now, for metrics.
func (c *Controller) Informers() []schema.GroupVersionResource {
	return c.engine.Watched()
}

// syncKey is sync for the worker loop, which owns the queue: it logs with
// the lock named, and logs and counts a failure, which the loop retries
// with backoff.
func (c *Controller) syncKey(ctx context.Context, key lockKey) (time.Duration, error) {
	logger := klog.FromContext(ctx).WithValues("helmRelease", key.ObjectName)
	if key.isManifestLock() {
		logger = klog.FromContext(ctx).WithValues("manifestLock", key.ObjectName)
	}
	ctx = klog.NewContext(ctx, logger)
	var res result
	err := recovered(ctx, key, func() (err error) {
		res, err = c.sync(ctx, key)
		return err
	})
	if err != nil {
		logger.V(2).Info("Sync failed, retrying", "err", err, "retries", c.queue.NumRequeues(key))
		if !key.isManifestLock() {
			c.cfg.Metrics.ReconcileError(key.Namespace, key.Name)
		}
		return 0, err
	}
	return res.requeueAfter, nil
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

func (c *Controller) enqueueCR(obj any) {
	if key, ok := keyOf(v1alpha1.Kind, obj); ok {
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

// recovered turns a panic in f, while it works on key, into an error for
// that key, retried with backoff, so one bad lock cannot take the process
// and every other lock down with it. The worker loop would recover it too;
// recovered logs it, with its stack, and lets the caller log and count the
// failure as any other.
func recovered(ctx context.Context, key lockKey, f func() error) error {
	err := worker.Recover(key, f)
	if p := (*worker.PanicError)(nil); errors.As(err, &p) {
		klog.FromContext(ctx).Error(err, "Recovered; it will be retried", "stack", string(p.Stack))
	}
	return err
}

// sync brings the lock of one key in line: a HelmRelease CR's, or a
// ManifestLock's. The loop that calls it owns the queue.
func (c *Controller) sync(ctx context.Context, key lockKey) (result, error) {
	if key.isManifestLock() {
		return c.syncManifestLock(ctx, key)
	}
	if c.arrivals.holds(key) {
		// Queued again once it is declared.
		return result{}, nil
	}
	return c.syncHelmRelease(ctx, key)
}

package twoway

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/engine/worker"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/registry"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/throttle"
)

// Defaults of Config.UpgradeInterval and Config.UpgradeMaxPerHour.
const (
	DefaultUpgradeInterval   = throttle.DefaultInterval
	DefaultUpgradeMaxPerHour = throttle.DefaultMaxPerHour
)

// EventRenderChanged is the event of a chart that renders differently now
// than its locked revision stores.
const EventRenderChanged = "RenderChanged"

// renderWorkers is how many releases are rendered again at once. Renders
// take CPU that reverts need, so they are few, and have their own queue:
// a render never waits in front of a revert.
const renderWorkers = 2

// renderStartLimit is how long after the controller starts the locker
// renders at the latest, even if some lock never settles.
const renderStartLimit = time.Minute

// renderDelay gathers the causes of a render that come together, such as
// every lookup target a `helm upgrade` of another release rewrites.
const renderDelay = 500 * time.Millisecond

// Renderer renders a revision's chart on a cluster, as render.Render
// does, wherever it runs it.
type Renderer interface {
	Render(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, error)
}

// inProcess is the Renderer of a Config that names none.
type inProcess struct{}

func (inProcess) Render(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, error) {
	return render.Render(ctx, rel, c)
}

// Watches are the engine's watches of single objects, and what it knows
// of the types it may watch: *engine.Engine.
type Watches interface {
	Watch(key string, targets []engine.WatchTarget, notify func(engine.WatchTarget))
	Unwatch(key string)
	WatchError(gvr schema.GroupVersionResource) error
	Unwatched() []schema.GroupVersionResource
}

var _ Watches = (*engine.Engine)(nil)

// Locks is what two-way locking reads of the controller that holds the
// locks. Keys are HelmReleases' namespace/name.
type Locks interface {
	// HelmRelease is the CR of key as the cache shows it now.
	HelmRelease(key cache.ObjectName) (*v1alpha1.HelmRelease, bool)
	// ServiceAccount is the ServiceAccount hr's lock writes as, "" for
	// the locker's own identity.
	ServiceAccount(hr *v1alpha1.HelmRelease) string
	// Writer is the client that reads and writes as ServiceAccount name
	// in namespace: a chart's lookups are made with it.
	Writer(namespace, name string) (dynamic.Interface, error)
	// LatestRevision reads the release's highest revision afresh.
	LatestRevision(ctx context.Context, rk v1alpha1.ReleaseKey) (Revision, error)
	// Settled reports whether every lock has settled since the start
	// and none waits to sync: renders wait until then.
	Settled() bool
	// Resync syncs key's lock again, to report what a render found.
	Resync(key cache.ObjectName)
}

// Revision is a release's revision as its Secret's labels say.
type Revision struct {
	Number int
	Status string
	UID    types.UID
}

// Config is what two-way locking needs.
type Config struct {
	// ControllerName is matched against the managed-by annotation of the
	// CRs it reads.
	ControllerName string
	// DefaultRerender is the mode of a HelmRelease that sets none; empty
	// is Off.
	DefaultRerender v1alpha1.Rerender
	// UpgradeInterval is the least time between two of Upgrade mode's
	// upgrades of a release, doubled while their cause keeps changing
	// (see throttle.Throttle.Allow), and UpgradeMaxPerHour how many it
	// makes of a release within any hour; DefaultUpgradeInterval and
	// DefaultUpgradeMaxPerHour if zero.
	UpgradeInterval   time.Duration
	UpgradeMaxPerHour int
	// Kube reads release Secrets and the cluster's version and APIs;
	// Mapper maps the kinds a chart renders; REST is what upgrades
	// impersonate the writer with.
	Kube   kubernetes.Interface
	Mapper meta.RESTMapper
	REST   *rest.Config
	// Recorder records events on HelmRelease CRs; it must be set.
	Recorder record.EventRecorder
	// Metrics, if set, receives the renders' figures.
	Metrics *metrics.Metrics
	// Renderer renders charts; nil renders in this process
	// (render.Render).
	Renderer Renderer
	// Charts reads the charts of spec.chartRef; nil reads none, and a
	// release that names one is not rendered.
	Charts Charts
	// Upgrader makes Upgrade mode's upgrades; nil upgrades through the
	// SDK of the Helm that wrote the revision.
	Upgrader Upgrader
	// Clock is what the upgrades' throttle and records tell the time
	// by; nil is the real clock.
	Clock clock.PassiveClock
}

// Renders renders locked releases again. The lock's sync sets what each
// renders (Trust); its workers render, and the lock's next sync reports
// what they found (the Report Trust returns): the status has one writer.
type Renders struct {
	cfg     Config
	watches Watches
	locks   Locks
	// queue is the releases to render again, states what is known of
	// each, and cluster the .Capabilities they render with, learned
	// again on clusterCheck.
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	states registry.Map[cache.ObjectName, *renderState]
	// failedUpgrades are the last upgrades of Upgrade mode that Helm
	// failed, by release, as their statuses record them (see
	// RememberFailedUpgrade).
	failedUpgrades registry.Map[v1alpha1.ReleaseKey, v1alpha1.FailedUpgrade]
	// upgrades bound how often Upgrade mode upgrades each release.
	upgrades     *throttle.Throttle[v1alpha1.ReleaseKey]
	cluster      clusterInfo
	clusterCheck chan struct{}
}

// New builds two-way locking. It does no I/O; Run starts it.
func New(cfg Config, watches Watches, locks Locks) *Renders {
	if cfg.UpgradeInterval <= 0 {
		cfg.UpgradeInterval = DefaultUpgradeInterval
	}
	if cfg.UpgradeMaxPerHour <= 0 {
		cfg.UpgradeMaxPerHour = DefaultUpgradeMaxPerHour
	}
	if cfg.Renderer == nil {
		cfg.Renderer = inProcess{}
	}
	if cfg.Upgrader == nil {
		cfg.Upgrader = helmUpgrader{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Renders{
		cfg:          cfg,
		watches:      watches,
		locks:        locks,
		queue:        newRenderQueue(cfg.Metrics.WorkqueueProvider()),
		upgrades:     throttle.New[v1alpha1.ReleaseKey](throttle.Options{Interval: cfg.UpgradeInterval, MaxPerHour: cfg.UpgradeMaxPerHour}, cfg.Clock),
		clusterCheck: make(chan struct{}, 1),
	}
}

// newRenderQueue is the renderer's queue: its own, so that a render never
// waits in front of a revert.
func newRenderQueue(metrics workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](time.Second, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "renders", MetricsProvider: metrics})
}

// Run renders releases again until ctx is done, once a cold start's locks
// have settled, and learns the cluster's version and served APIs again
// whenever ClusterMoved says they may have changed.
func (r *Renders) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.watchCluster(ctx) })
	// Nothing renders before every HelmRelease's lock has settled and
	// the lock queue is empty, or a minute has passed: locks that never
	// settle, or a queue that is never empty, must not keep renders off
	// for good.
	limit := time.Now().Add(renderStartLimit)
	for !r.locks.Settled() {
		if time.Now().After(limit) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	worker.Run(ctx, r.queue, renderWorkers, r.Render)
}

// ShutDown stops the render queue; the owner of Run calls it once Run
// is asked to stop, and when Run was never started.
func (r *Renders) ShutDown() { r.queue.ShutDown() }

// Mode is the rerender policy of hr.
func (r *Renders) Mode(hr *v1alpha1.HelmRelease) v1alpha1.Rerender {
	if hr.Spec.Rerender != "" {
		return hr.Spec.Rerender
	}
	if r.cfg.DefaultRerender != "" {
		return r.cfg.DefaultRerender
	}
	return v1alpha1.RerenderOff
}

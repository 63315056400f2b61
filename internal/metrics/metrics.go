package metrics

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	"github.com/helm-locker/helm-locker/internal/events"
)

const namespace = "helm_locker"

// Metrics are the locker's metrics, on their own registry. A nil *Metrics
// records nothing, so code paths need no checks.
type Metrics struct {
	registry *prometheus.Registry

	lockedReleases prometheus.Gauge
	lockedObjects  prometheus.Gauge
	perRelease     *releaseCounters
	revertLatency  prometheus.Histogram
	reviews        *prometheus.CounterVec
	eventsDropped  *prometheus.CounterVec
	workqueue      *workqueueProvider
	client         *clientRequests
	webhook        *webhookMetrics
	render         *renderMetrics

	mu       sync.Mutex
	releases map[string]releaseFigures // by CR key; see helmReleaseSeries
	managers map[string]bool           // named in drift_detected_total; see managerLabel
}

// releaseFigures are a HelmRelease's figures: its series (release_locked,
// helm_operation_stuck, reconcile_errors_total) are made from them at
// each scrape (see helmReleaseSeries), where a GaugeVec's or CounterVec's
// would keep 700 bytes each, in a dozen small allocations made among the
// cold lock's garbage.
type releaseFigures struct {
	locked, stuck bool
	objects       int
	errors        float64
}

// New registers the metrics. informers lists the resource types watched
// now; it is read at each scrape.
func New(informers func() []schema.GroupVersionResource) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		lockedReleases: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "locked_releases",
			Help: "Releases whose every object is checked and held as the manifest declares.",
		}),
		lockedObjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "locked_objects",
			Help: "Objects checked and held as their manifest declares, over all releases.",
		}),
		perRelease: newReleaseCounters(),
		revertLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "revert_latency_seconds",
			Help:    "From the watch event that showed a drift to the response of its correction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admission_reviews_total",
			Help: "Admission requests the webhook answered, dry runs aside, by whether it allowed them: what the API server's matchConditions let reach it.",
		}, []string{"allowed"}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_dropped_total",
			Help: "Events not written, by why: QueueFull, RateLimited (repeats on one object past client-go's limit), Rejected, Unreachable, Invalid, Shutdown.",
		}, []string{"reason"}),
		releases: map[string]releaseFigures{},
		managers: maps.Clone(knownManagers),
	}
	m.registry.MustRegister(
		m.lockedReleases, m.lockedObjects, &helmReleaseSeries{m: m}, m.perRelease, m.revertLatency, m.reviews, m.eventsDropped,
		&informerCollector{list: informers, desc: prometheus.NewDesc(namespace+"_informers",
			"Informers running, per resource type (1 while it runs).", []string{"group", "version", "resource"}, nil)},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Each reason's series exists from the start at 0, so that rate()
	// sees the first drop.
	for _, reason := range EventDropReasons {
		m.eventsDropped.WithLabelValues(reason)
	}
	// So does each answer's: the dashboard shows 0 reviews, not "No
	// data", until the webhook's first.
	for _, allowed := range []bool{true, false} {
		m.reviews.WithLabelValues(strconv.FormatBool(allowed))
	}
	m.workqueue = newWorkqueueProvider(m.registry)
	m.client = newClientRequests(m.registry)
	m.webhook = newWebhookMetrics(m.registry)
	m.render = newRenderMetrics(m.registry)
	return m
}

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// EventDropReasons are the reasons events_dropped_total counts under, the
// events package's; each series exists from the start at 0.
var EventDropReasons = []string{events.DropQueueFull, events.DropRateLimited, events.DropRejected, events.DropUnreachable, events.DropInvalid, events.DropShutdown}

// ObserveRelease records where one HelmRelease's lock stands, in the
// totals and in its own release_locked. The first time it sees a
// HelmRelease it creates its other series at 0, its reconcile errors and
// helm_operation_stuck: a labelled counter appears only at its first
// increment, which rate() and increase() would then miss.
func (m *Metrics) ObserveRelease(key string, locked bool, objects int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.releases[key]
	f.locked, f.objects = locked, objects
	m.releases[key] = f
	m.totalsLocked()
}

// ObserveHelmOperation records whether the HelmRelease key (namespace/name)
// holds its last verified revision again because Helm's operation on a
// newer one outlasted the Helm operation timeout.
func (m *Metrics) ObserveHelmOperation(key string, stuck bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.releases[key]
	f.stuck = stuck
	m.releases[key] = f
}

// HoldRelease creates at 0 the series of a release a lock holds, one for
// each kind of its objects: its corrections, fights and denials, so that
// a rate() or increase() over them sees the first, and a dashboard shows
// 0 rather than "No data". drift_detected_total's manager label is known
// only at a drift, and a series for each known manager and kind would
// multiply /metrics, so its series at 0 is the "unknown" manager's.
// namespace and name are the release's; ForgetLock deletes them.
func (m *Metrics) HoldRelease(namespace, name string, kinds []string) {
	if m == nil || name == "" {
		return
	}
	m.perRelease.hold(releaseKey{namespace, name}, kinds)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ForgetRelease drops a HelmRelease that is gone or no longer served: its
// figures, and its series (reconcile errors, locked, stuck). The series
// of the release it held go with ForgetLock.
func (m *Metrics) ForgetRelease(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.releases, key)
	m.totalsLocked()
}

// ForgetLock deletes every series that names a release no lock holds
// any more (its HelmRelease is gone, no longer served, or now holds
// another release): its drifts, corrections, fights and denials. Without
// it, every release ever held would stay in /metrics. namespace and name
// are the release's; a ManifestLock's series go with ForgetManifestLock.
func (m *Metrics) ForgetLock(namespace, name string) {
	if m == nil || name == "" {
		return
	}
	m.perRelease.forget(releaseKey{namespace, name})
}

// ForgetManifestLock deletes the series of a ManifestLock that is gone or
// no longer served: its denials, the only series it has.
func (m *Metrics) ForgetManifestLock(namespace, name string) {
	if m == nil || name == "" {
		return
	}
	m.perRelease.forget(releaseKey{namespace, ManifestLockRelease(name)})
}

// ManifestLockRelease is the release label of a ManifestLock's series:
// "ManifestLock/<name>". A ManifestLock may be named as any release is,
// and a tenant may create and delete one in a release's namespace, so
// with its bare name its denials would add to that release's series and
// deleting it would delete them, the release's drifts included, and
// silence an alert. A release name holds no '/' nor capital (Helm's rule,
// and the HelmRelease CRD's pattern), so these never meet a release's.
func ManifestLockRelease(name string) string { return "ManifestLock/" + name }

// KnowManagers adds field managers that drift_detected_total names rather
// than count as "other": the names --helm-field-managers gives Helm. The
// admin sets these; nothing a writer sends adds one.
func (m *Metrics) KnowManagers(names ...string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		m.managers[n] = true
	}
}

// knownManagers are the field managers drift_detected_total names: Helm's,
// kubectl's (each command writes as kubectl-<command>), Kubernetes' own
// controllers' and the locker's. A field manager is whatever the writer
// sends (?fieldManager=, or its user agent), so a label for each would let
// anyone who may edit a locked object grow /metrics without bound.
var knownManagers = map[string]bool{
	"helm": true,
	// The locker's own writes, and its CLI's (cmd/helm-locker).
	"helm-locker": true, "helm-locker-cli": true,
	// kubectl: server-side apply, client-side apply, and the commands
	// that write.
	"kubectl": true, "kubectl-client-side-apply": true, "kubectl-last-applied": true,
	"kubectl-annotate": true, "kubectl-autoscale": true, "kubectl-create": true, "kubectl-edit": true,
	"kubectl-expose": true, "kubectl-label": true, "kubectl-patch": true, "kubectl-replace": true,
	"kubectl-rollout": true, "kubectl-run": true, "kubectl-scale": true, "kubectl-set": true, "kubectl-taint": true,
	// Kubernetes' own; before-first-apply is what csaupgrade leaves.
	"kube-controller-manager": true, "kube-scheduler": true, "kubelet": true, "kube-apiserver": true,
	"before-first-apply": true,
}

// managerLabel is manager as drift_detected_total names it: itself if
// known, "unknown" if none was recorded, "other" for any other.
func (m *Metrics) managerLabel(manager string) string {
	if manager == "" {
		return unknownManager
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.managers[manager] {
		return manager
	}
	return "other"
}

func (m *Metrics) totalsLocked() {
	releases, objects := 0, 0
	for _, f := range m.releases {
		if f.locked {
			releases++
		}
		objects += f.objects
	}
	m.lockedReleases.Set(float64(releases))
	m.lockedObjects.Set(float64(objects))
}

// Drift counts one drift of an object of kind in a release, made by
// manager ("" for unknown; see managerLabel); corrected with its latency
// when it was written back.
func (m *Metrics) Drift(releaseNamespace, release, kind, manager string, corrected bool, latency time.Duration) {
	if m == nil {
		return
	}
	r := releaseKey{releaseNamespace, release}
	m.perRelease.add(r, counterSeries{family: driftDetected, kind: kind, manager: m.managerLabel(manager)}, 1)
	if corrected {
		m.perRelease.add(r, counterSeries{family: driftCorrected, kind: kind}, 1)
		m.revertLatency.Observe(latency.Seconds())
	}
}

// Fight counts a fight over an object of kind in a release that the lock
// began backing off from.
func (m *Metrics) Fight(releaseNamespace, release, kind string) {
	if m == nil {
		return
	}
	m.perRelease.add(releaseKey{releaseNamespace, release}, counterSeries{family: fights, kind: kind}, 1)
}

// ReconcileError counts a failed sync of a HelmRelease.
func (m *Metrics) ReconcileError(namespace, name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + name
	f := m.releases[key]
	f.errors++
	m.releases[key] = f
}

// Denied counts a request Prevent mode denied, to an object of kind held
// by release in namespace: a release's, or a ManifestLock's namespace and
// ManifestLockRelease.
func (m *Metrics) Denied(namespace, release, kind string) {
	if m == nil {
		return
	}
	m.perRelease.add(releaseKey{namespace, release}, counterSeries{family: denied, kind: kind}, 1)
}

// Reviewed counts an admission request the webhook answered.
func (m *Metrics) Reviewed(allowed bool) {
	if m == nil {
		return
	}
	m.reviews.WithLabelValues(strconv.FormatBool(allowed)).Inc()
}

// EventDropped counts an event not written, and why.
func (m *Metrics) EventDropped(reason string) {
	if m == nil {
		return
	}
	m.eventsDropped.WithLabelValues(reason).Inc()
}

// WorkqueueProvider reports client-go workqueue metrics into the registry;
// nil when m is nil, which a queue takes as no metrics.
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider {
	if m == nil {
		return nil
	}
	return m.workqueue
}

// informerCollector reports the running informers at scrape time, so the
// metric never lags or outlives an informer.
type informerCollector struct {
	list func() []schema.GroupVersionResource
	desc *prometheus.Desc
}

func (c *informerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *informerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.list == nil {
		return
	}
	for _, gvr := range c.list() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, gvr.Group, gvr.Version, gvr.Resource)
	}
}

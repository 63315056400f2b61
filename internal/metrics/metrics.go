package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
)

const namespace = "helm_locker"

// Metrics are the locker's metrics, on their own registry. A nil *Metrics
// records nothing, so code paths need no checks.
type Metrics struct {
	registry *prometheus.Registry

	lockedReleases prometheus.Gauge
	lockedObjects  prometheus.Gauge
	driftDetected  *prometheus.CounterVec
	driftCorrected *prometheus.CounterVec
	fights         *prometheus.CounterVec
	revertLatency  prometheus.Histogram
	reconcileErrs  *prometheus.CounterVec
	denied         *prometheus.CounterVec
	reviews        *prometheus.CounterVec
	eventsDropped  *prometheus.CounterVec
	workqueue      *workqueueProvider
	client         *clientRequests

	mu       sync.Mutex
	releases map[string]releaseFigures // by CR key
}

type releaseFigures struct {
	locked  bool
	objects int
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
		driftDetected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "drift_detected_total",
			Help: "Objects found not as their manifest declares; manager is the field manager that made the drift (the first, when several did), \"unknown\" if none is recorded.",
		}, []string{"namespace", "release", "kind", "manager"}),
		driftCorrected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "drift_corrected_total",
			Help: "Drifted objects written back to their manifest.",
		}, []string{"namespace", "release", "kind"}),
		fights: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "fights_total",
			Help: "Fights the lock backed off from: another actor kept rewriting a held field of an object of kind.",
		}, []string{"namespace", "release", "kind"}),
		revertLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "revert_latency_seconds",
			Help:    "From the watch event that showed a drift to the response of its correction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		reconcileErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "reconcile_errors_total",
			Help: "Syncs of a HelmRelease that ended in an error and were retried.",
		}, []string{"namespace", "name"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admission_denied_total",
			Help: "Requests Prevent mode denied at admission, dry runs aside; release is the release's name or the ManifestLock's.",
		}, []string{"namespace", "release", "kind"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admission_reviews_total",
			Help: "Admission requests the webhook answered, dry runs aside, by whether it allowed them: what the API server's matchConditions let reach it.",
		}, []string{"allowed"}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_dropped_total",
			Help: "Events not written, by why: QueueFull, RateLimited (repeats on one object past client-go's limit), Rejected, Unreachable, Invalid, Shutdown.",
		}, []string{"reason"}),
		releases: map[string]releaseFigures{},
	}
	m.registry.MustRegister(
		m.lockedReleases, m.lockedObjects, m.driftDetected, m.driftCorrected, m.fights, m.revertLatency, m.reconcileErrs, m.denied, m.reviews, m.eventsDropped,
		&informerCollector{list: informers, desc: prometheus.NewDesc(namespace+"_informers",
			"Informers running, per resource type (1 while it runs).", []string{"group", "version", "resource"}, nil)},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.workqueue = newWorkqueueProvider(m.registry)
	m.client = newClientRequests(m.registry)
	return m
}

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// ObserveRelease records where one HelmRelease's lock stands.
func (m *Metrics) ObserveRelease(key string, locked bool, objects int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releases[key] = releaseFigures{locked: locked, objects: objects}
	m.totalsLocked()
}

// ForgetRelease drops a HelmRelease that is gone or no longer served.
func (m *Metrics) ForgetRelease(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.releases, key)
	m.totalsLocked()
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
// manager ("" for unknown); corrected with its latency when it was written
// back.
func (m *Metrics) Drift(releaseNamespace, release, kind, manager string, corrected bool, latency time.Duration) {
	if m == nil {
		return
	}
	if manager == "" {
		manager = "unknown"
	}
	m.driftDetected.WithLabelValues(releaseNamespace, release, kind, manager).Inc()
	if corrected {
		m.driftCorrected.WithLabelValues(releaseNamespace, release, kind).Inc()
		m.revertLatency.Observe(latency.Seconds())
	}
}

// Fight counts a fight over an object of kind in a release that the lock
// began backing off from.
func (m *Metrics) Fight(releaseNamespace, release, kind string) {
	if m == nil {
		return
	}
	m.fights.WithLabelValues(releaseNamespace, release, kind).Inc()
}

// ReconcileError counts a failed sync of a HelmRelease.
func (m *Metrics) ReconcileError(namespace, name string) {
	if m == nil {
		return
	}
	m.reconcileErrs.WithLabelValues(namespace, name).Inc()
}

// Denied counts a request Prevent mode denied, to an object of kind held
// by release (a ManifestLock's name for such a lock) in namespace.
func (m *Metrics) Denied(namespace, release, kind string) {
	if m == nil {
		return
	}
	m.denied.WithLabelValues(namespace, release, kind).Inc()
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

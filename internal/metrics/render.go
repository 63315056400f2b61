package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RenderResults are the results a render of a release's chart counts
// under, each created at 0 so that a rate over them never misses the
// first: Current (renders as stored), Stale (would render differently),
// Forbidden (a lookup the write identity may not make), Failed (the chart
// or its revision cannot be rendered), NoWriteIdentity (nothing to render
// as), Upgraded, UpgradeFailed and UpgradeThrottled (Upgrade mode's
// upgrades, and those held back by --rerender-upgrade-interval or
// --rerender-upgrade-max-per-hour).
var RenderResults = []string{"Current", "Stale", "Forbidden", "Failed", "NoWriteIdentity", "Upgraded", "UpgradeFailed", "UpgradeThrottled"}

// renderMetrics are the figures of two-way locking: renders of releases'
// charts against the cluster as it is now.
type renderMetrics struct {
	stale    *prometheus.GaugeVec
	renders  *prometheus.CounterVec
	duration prometheus.Histogram
}

func newRenderMetrics(r prometheus.Registerer) *renderMetrics {
	m := &renderMetrics{
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "render_stale",
			Help: "1 while the release's chart, rendered against the cluster as it is now, renders differently from its locked revision; 0 while it renders as stored. namespace and release are the Helm release's.",
		}, []string{"namespace", "release"}),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "renders_total",
			Help: "Renders of releases' charts (spec.rerender Report or Upgrade), and Upgrade mode's upgrades, by result: Current, Stale, Forbidden, Failed, NoWriteIdentity, Upgraded, UpgradeFailed, UpgradeThrottled (an upgrade held back).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "render_duration_seconds",
			Help:    "How long a render of a release's chart took, its lookups and the second render that finds generated values included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	for _, result := range RenderResults {
		m.renders.WithLabelValues(result)
	}
	r.MustRegister(m.stale, m.renders, m.duration)
	return m
}

// ObserveRender records a render of release namespace/name's chart that
// took d, with its result (one of RenderResults). Only Current and Stale
// say whether the release is stale; the others leave it as it was.
func (m *Metrics) ObserveRender(namespace, release, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.render.renders.WithLabelValues(result).Inc()
	if d > 0 {
		m.render.duration.Observe(d.Seconds())
	}
	switch result {
	case "Current":
		m.render.stale.WithLabelValues(namespace, release).Set(0)
	case "Stale":
		m.render.stale.WithLabelValues(namespace, release).Set(1)
	}
}

// ForgetRender drops the staleness of a release no longer rendered.
func (m *Metrics) ForgetRender(namespace, release string) {
	if m == nil {
		return
	}
	m.render.stale.DeleteLabelValues(namespace, release)
}

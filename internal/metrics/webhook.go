package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/helm-locker/helm-locker/internal/admission"
)

// webhookMetrics say whether admission works at all: the webhook fails
// open (failurePolicy Ignore), so a webhook the API server cannot reach
// denies nothing and says nothing.
type webhookMetrics struct {
	lastReview    prometheus.Gauge
	probeAnswered prometheus.Gauge
	shed          *prometheus.CounterVec
}

// The reasons a review is shed; the series of each exist from the start
// at 0, so that rate() sees the first one.
var shedReasons = []string{admission.ShedBusy, admission.ShedTooLarge, admission.ShedSlowBody, admission.ShedMismatch}

func newWebhookMetrics(r prometheus.Registerer) *webhookMetrics {
	w := &webhookMetrics{
		lastReview: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "webhook_last_review_timestamp_seconds",
			Help: "When this replica last answered an admission review, dry runs and the leader's probe included; 0 if never. Anyone who can reach the port can send one: the probe's gauge is the one to alert on.",
		}),
		probeAnswered: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "webhook_probe_answered_timestamp_seconds",
			Help: "When the leader's probe, a dry-run write sent through the API server, last came back answered by the webhook; 0 if never. Alert when time() minus it exceeds a few probe intervals: admission is failing open.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admission_reviews_shed_total",
			Help: "Admission requests let through unjudged: refused unread, and so let through by failurePolicy Ignore, as Busy (too many at once), TooLarge (a body no stored object could make) or SlowBody (a body that did not arrive within a second); or Mismatch, allowed since the review names a held object but carries another, which only a forged review does.",
		}, []string{"reason"}),
	}
	for _, reason := range shedReasons {
		w.shed.WithLabelValues(reason)
	}
	r.MustRegister(w.lastReview, w.probeAnswered, w.shed)
	return w
}

// Answered records that this replica answered an admission review at at.
func (m *Metrics) Answered(at time.Time) {
	if m == nil {
		return
	}
	m.webhook.lastReview.Set(float64(at.UnixNano()) / 1e9)
}

// Shed counts an admission request let through unjudged, and why.
func (m *Metrics) Shed(reason string) {
	if m == nil {
		return
	}
	m.webhook.shed.WithLabelValues(reason).Inc()
}

// ProbeAnswered records that the leader's probe came back answered at at.
func (m *Metrics) ProbeAnswered(at time.Time) {
	if m == nil {
		return
	}
	m.webhook.probeAnswered.Set(float64(at.UnixNano()) / 1e9)
}

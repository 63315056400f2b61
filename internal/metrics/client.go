package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// clientRequests reports every request client-go's REST clients send,
// under the names Kubernetes components use (rest_client_*), so that the
// locker's load on the API server can be read from its own /metrics:
// what it sends when idle, what a cold lock costs.
type clientRequests struct {
	results *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

var (
	_ clientmetrics.ResultMetric  = (*clientRequests)(nil)
	_ clientmetrics.LatencyMetric = (*clientLatency)(nil)
)

func newClientRequests(r prometheus.Registerer) *clientRequests {
	c := &clientRequests{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "HTTP requests to the API server, by status code, method and host; a watch counts once, when it opens."}, []string{"code", "method", "host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help:    "Seconds from sending a request to the API server to its response headers, by verb and host.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"verb", "host"}),
	}
	r.MustRegister(c.results, c.latency)
	return c
}

// Increment implements client-go's ResultMetric.
func (c *clientRequests) Increment(_ context.Context, code, method, host string) {
	c.results.WithLabelValues(code, method, host).Inc()
}

// clientLatency implements client-go's LatencyMetric. The URL's host is
// kept and its path dropped: paths name objects, which would make a series
// per object.
type clientLatency clientRequests

func (c *clientLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	c.latency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

// ReportClientRequests makes client-go's REST clients report their
// requests into m. client-go holds one set of these hooks per process: the
// first call wins and later calls, from this or any other Metrics, change
// nothing. The hooks are set, not Registered: client-go's Register takes
// only the first registration, and a library linked in (controller-runtime,
// through Helm 4's SDK) registers its own from an init function, which
// left the locker's requests uncounted.
func (m *Metrics) ReportClientRequests() {
	if m == nil {
		return
	}
	reportOnce.Do(func() {
		clientmetrics.RequestResult = m.client
		clientmetrics.RequestLatency = (*clientLatency)(m.client)
	})
}

var reportOnce sync.Once

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// workqueueProvider implements client-go's workqueue.MetricsProvider with
// the metric names controller-runtime uses, so existing dashboards work.
type workqueueProvider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*workqueueProvider)(nil)

func newWorkqueueProvider(r prometheus.Registerer) *workqueueProvider {
	const sub = "workqueue"
	label := []string{"name"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	p := &workqueueProvider{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "depth",
			Help: "Current depth of workqueue."}, label),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress that has not been observed by work_duration."}, label),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "longest_running_processor_seconds",
			Help: "Seconds the longest running processor has been running."}, label),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "adds_total",
			Help: "Total number of adds handled by workqueue."}, label),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "retries_total",
			Help: "Total number of retries handled by workqueue."}, label),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "queue_duration_seconds",
			Help: "Seconds an item stays in workqueue before being requested.", Buckets: buckets}, label),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "work_duration_seconds",
			Help: "Seconds processing an item from workqueue takes.", Buckets: buckets}, label),
	}
	r.MustRegister(p.depth, p.unfinished, p.longest, p.adds, p.retries, p.latency, p.work)
	return p
}

func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}

func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}

func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}

func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}

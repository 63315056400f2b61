package metrics

import "github.com/prometheus/client_golang/prometheus"

// watchingCollector reports, at scrape time, whether every watch the
// locker needs sees changes as they happen: what /readyz says of a leader,
// for an alert, since a lock cannot hold what it cannot see.
type watchingCollector struct {
	watching func() bool
	desc     *prometheus.Desc
}

func (c *watchingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *watchingCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if c.watching() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
}

// ReportWatching exports helm_locker_watches_current: 1 while watching
// reports that every watch the locker needs is current, 0 while one is
// not listed yet or failing (an API server outage, a cut connection).
// Call it once.
func (m *Metrics) ReportWatching(watching func() bool) {
	if m == nil {
		return
	}
	m.registry.MustRegister(&watchingCollector{watching: watching, desc: prometheus.NewDesc(namespace+"_watches_current",
		"1 while every watch the locker needs sees changes as they happen (its readiness), 0 while one is not listed yet or failing.", nil, nil)})
}

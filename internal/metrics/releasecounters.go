package metrics

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// releaseFamily is one of the counters kept per release and kind.
type releaseFamily uint8

const (
	driftDetected releaseFamily = iota
	driftCorrected
	fights
	denied
	releaseFamilies
)

// counterSeries names one series of a release: its family, kind and, for
// driftDetected, manager.
type counterSeries struct {
	family        releaseFamily
	kind, manager string
}

// releaseKey is a release's namespace and name.
type releaseKey struct{ namespace, release string }

// releaseCounters are the counters a release has for each kind of its
// objects (drift_detected_total, drift_corrected_total, fights_total,
// admission_denied_total), every one of them created at 0 when the
// release is held (see HoldRelease). A CounterVec keeps 666 bytes for
// each series, in a dozen small allocations: at 100,000 locked objects in
// 2,000 releases of 5 kinds, 17 MiB, 13% of the locker's heap, scattered
// among the garbage of the cold lock. Here a series is a map entry, about
// 100 bytes (BenchmarkHeldSeries), and a release's go together when it is
// forgotten.
type releaseCounters struct {
	descs [releaseFamilies]*prometheus.Desc

	mu     sync.Mutex
	values map[releaseKey]map[counterSeries]float64
}

func newReleaseCounters() *releaseCounters {
	c := &releaseCounters{values: map[releaseKey]map[counterSeries]float64{}}
	c.descs[driftDetected] = prometheus.NewDesc(namespace+"_drift_detected_total",
		"Objects found not as their manifest declares; manager is the field manager that made the drift (the first, when several did): Helm's, kubectl's, Kubernetes' own or the locker's by name, \"other\" for any other, \"unknown\" if none is recorded.",
		[]string{"namespace", "release", "kind", "manager"}, nil)
	c.descs[driftCorrected] = prometheus.NewDesc(namespace+"_drift_corrected_total",
		"Drifted objects written back to their manifest.", []string{"namespace", "release", "kind"}, nil)
	c.descs[fights] = prometheus.NewDesc(namespace+"_fights_total",
		"Fights the lock backed off from: another actor kept rewriting a held field of an object of kind.", []string{"namespace", "release", "kind"}, nil)
	c.descs[denied] = prometheus.NewDesc(namespace+"_admission_denied_total",
		"Requests Prevent mode denied at admission, dry runs aside; release is the release's name, or ManifestLock/<name> for a ManifestLock.",
		[]string{"namespace", "release", "kind"}, nil)
	return c
}

// add adds v to a series of release r, creating it if need be; v 0 only
// creates it.
func (c *releaseCounters) add(r releaseKey, s counterSeries, v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	series := c.values[r]
	if series == nil {
		series = map[counterSeries]float64{}
		c.values[r] = series
	}
	series[s] += v
}

// forget deletes every series of release r.
func (c *releaseCounters) forget(r releaseKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.values, r)
}

// Describe implements prometheus.Collector.
func (c *releaseCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. The values are copied out
// first, so that a scrape does not hold up the drifts being counted.
//
// A held release keeps 20 series at 0 (see HoldRelease): at 2,000
// releases a scrape is 40,000 samples. prometheus.MustNewConstMetric
// made, checked and sorted each sample's label pairs anew: a scrape
// allocated 59 MB in 722,000 allocations (BenchmarkScrape), and a
// locker scraped every 15 s carries that garbage, and the holes it
// leaves in the heap. Here every sample's labels point at pairs made
// once a scrape for each value (a release's namespace and name are
// shared by its 20 series, a kind or a manager by thousands), and the
// samples and their labels are one allocation each: 28 MB in 94,000.
func (c *releaseCounters) Collect(ch chan<- prometheus.Metric) {
	type sample struct {
		r releaseKey
		s counterSeries
		v float64
	}
	c.mu.Lock()
	n := 0
	for _, series := range c.values {
		n += len(series)
	}
	samples := make([]sample, 0, n)
	for r, series := range c.values {
		for s, v := range series {
			samples = append(samples, sample{r, s, v})
		}
	}
	c.mu.Unlock()
	// In the order the registry sorts each family's samples in, by
	// their labels' values taken in their names' order (kind, manager,
	// namespace, release): a sorted input is nearly free for its sort,
	// which at 40,000 series in map order was a third of a scrape
	// (BenchmarkScrape).
	slices.SortFunc(samples, func(a, b sample) int {
		return cmp.Or(cmp.Compare(a.s.family, b.s.family), strings.Compare(a.s.kind, b.s.kind), strings.Compare(a.s.manager, b.s.manager),
			strings.Compare(a.r.namespace, b.r.namespace), strings.Compare(a.r.release, b.r.release))
	})
	kinds, managers := labelPairs{name: "kind"}, labelPairs{name: "manager"}
	releases := map[releaseKey][2]*dto.LabelPair{}
	metrics := make([]counterMetric, len(samples))
	labels := make([]*dto.LabelPair, 0, 4*len(samples))
	for i, x := range samples {
		release, ok := releases[x.r]
		if !ok {
			release = [2]*dto.LabelPair{newLabelPair("namespace", x.r.namespace), newLabelPair("release", x.r.release)}
			releases[x.r] = release
		}
		// In their names' order, as the exposition wants them.
		first := len(labels)
		labels = append(labels, kinds.get(x.s.kind))
		if x.s.family == driftDetected {
			labels = append(labels, managers.get(x.s.manager))
		}
		labels = append(labels, release[0], release[1])
		m := &metrics[i]
		m.desc, m.labels = c.descs[x.s.family], labels[first:len(labels):len(labels)]
		m.value = x.v
		m.counter.Value = &m.value
		ch <- m
	}
}

// counterMetric is one sample of a release's counter, whose label pairs
// it shares with others (see releaseCounters.Collect).
type counterMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	value   float64
	counter dto.Counter
}

func (m *counterMetric) Desc() *prometheus.Desc { return m.desc }

func (m *counterMetric) Write(out *dto.Metric) error {
	out.Label, out.Counter = m.labels, &m.counter
	return nil
}

// labelPairs makes one label pair for each value of a label in a scrape.
type labelPairs struct {
	name  string
	pairs map[string]*dto.LabelPair
}

func (l *labelPairs) get(value string) *dto.LabelPair {
	if p, ok := l.pairs[value]; ok {
		return p
	}
	if l.pairs == nil {
		l.pairs = map[string]*dto.LabelPair{}
	}
	p := newLabelPair(l.name, value)
	l.pairs[value] = p
	return p
}

// newLabelPair returns a label pair; a value that is not UTF-8, which the
// registry would fail the whole scrape for, has its bad bytes replaced.
func newLabelPair(name, value string) *dto.LabelPair {
	if !utf8.ValidString(value) {
		value = strings.ToValidUTF8(value, "\uFFFD")
	}
	return &dto.LabelPair{Name: &name, Value: &value}
}

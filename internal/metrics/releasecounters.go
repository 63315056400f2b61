package metrics

import (
	"cmp"
	"math/bits"
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
// among the garbage of the cold lock. A map entry for each series kept
// 101 bytes a series, 2 KB a release; a release's counters are now one
// slice of its kinds, and go together when it is forgotten: with its
// HelmRelease's own series, 719 bytes a release where they took 3,533
// (BenchmarkHeldSeries).
type releaseCounters struct {
	descs [releaseFamilies]*prometheus.Desc

	mu     sync.Mutex
	values map[releaseKey][]kindCounters
}

// kindCounters are a release's counters for one kind of its objects.
type kindCounters struct {
	kind string
	// made has bit 1<<f set once family f's series exists; for
	// driftDetected, the unknown manager's.
	made   uint8
	counts [releaseFamilies]float64
	// byManager are driftDetected's series for the managers other than
	// unknownManager, each made at its first drift.
	byManager []managerCount
}

type managerCount struct {
	manager string
	count   float64
}

// unknownManager is drift_detected_total's manager when none is recorded.
const unknownManager = "unknown"

func newReleaseCounters() *releaseCounters {
	c := &releaseCounters{values: map[releaseKey][]kindCounters{}}
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
	kinds := c.values[r]
	k := counterOf(&kinds, s.kind)
	c.values[r] = kinds
	if s.family != driftDetected || s.manager == unknownManager {
		k.made |= 1 << s.family
		k.counts[s.family] += v
		return
	}
	i := slices.IndexFunc(k.byManager, func(m managerCount) bool { return m.manager == s.manager })
	if i < 0 {
		k.byManager = append(k.byManager, managerCount{manager: s.manager})
		i = len(k.byManager) - 1
	}
	k.byManager[i].count += v
}

// hold creates at 0 every series of release r for each of kinds (see
// HoldRelease).
func (c *releaseCounters) hold(r releaseKey, kinds []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	have := slices.Grow(c.values[r], len(kinds))
	for _, kind := range kinds {
		counterOf(&have, kind).made = 1<<releaseFamilies - 1
	}
	c.values[r] = have
}

// counterOf returns the counters of kind in kinds, adding them if need be.
func counterOf(kinds *[]kindCounters, kind string) *kindCounters {
	for i := range *kinds {
		if (*kinds)[i].kind == kind {
			return &(*kinds)[i]
		}
	}
	*kinds = append(*kinds, kindCounters{kind: kind})
	return &(*kinds)[len(*kinds)-1]
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
	for _, kinds := range c.values {
		for _, k := range kinds {
			n += bits.OnesCount8(k.made) + len(k.byManager)
		}
	}
	samples := make([]sample, 0, n)
	for r, kinds := range c.values {
		for _, k := range kinds {
			for f := range releaseFamilies {
				if k.made&(1<<f) == 0 {
					continue
				}
				s := counterSeries{family: f, kind: k.kind}
				if f == driftDetected {
					s.manager = unknownManager
				}
				samples = append(samples, sample{r, s, k.counts[f]})
			}
			for _, m := range k.byManager {
				samples = append(samples, sample{r, counterSeries{family: driftDetected, kind: k.kind, manager: m.manager}, m.count})
			}
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
		ch <- m
	}
}

// counterMetric is one sample of a release's counter, or with gauge set
// of a gauge, whose label pairs it shares with others (see
// releaseCounters.Collect).
type counterMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	value   float64
	gauge   bool
	counter dto.Counter
}

func (m *counterMetric) Desc() *prometheus.Desc { return m.desc }

func (m *counterMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.gauge {
		out.Gauge = &dto.Gauge{Value: &m.value}
		return nil
	}
	m.counter.Value = &m.value
	out.Counter = &m.counter
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

// helmReleaseSeries are each HelmRelease's series, made at each scrape
// from Metrics.releases: release_locked, helm_operation_stuck and
// reconcile_errors_total, labelled with the HelmRelease's namespace and
// name.
type helmReleaseSeries struct {
	m *Metrics
}

var (
	releaseLockedDesc = prometheus.NewDesc(namespace+"_release_locked",
		"1 while the HelmRelease's every object is checked and held as the manifest declares, 0 otherwise; namespace and name are the HelmRelease's own.",
		[]string{"namespace", "name"}, nil)
	helmOperationStuckDesc = prometheus.NewDesc(namespace+"_helm_operation_stuck",
		"1 while the HelmRelease's latest revision has stayed pending or uninstalling past --helm-operation-timeout (Ready is HelmOperationStuck), 0 otherwise; namespace and name are the HelmRelease's own.",
		[]string{"namespace", "name"}, nil)
	reconcileErrorsDesc = prometheus.NewDesc(namespace+"_reconcile_errors_total",
		"Syncs of a HelmRelease that ended in an error and were retried.",
		[]string{"namespace", "name"}, nil)
)

// Describe implements prometheus.Collector.
func (c *helmReleaseSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- releaseLockedDesc
	ch <- helmOperationStuckDesc
	ch <- reconcileErrorsDesc
}

// Collect implements prometheus.Collector; the figures are copied out
// first, as releaseCounters' are.
func (c *helmReleaseSeries) Collect(ch chan<- prometheus.Metric) {
	type figures struct {
		key string
		releaseFigures
	}
	c.m.mu.Lock()
	all := make([]figures, 0, len(c.m.releases))
	for key, f := range c.m.releases {
		all = append(all, figures{key, f})
	}
	c.m.mu.Unlock()
	metrics := make([]counterMetric, 0, 3*len(all))
	for _, f := range all {
		ns, name, ok := strings.Cut(f.key, "/")
		if !ok {
			continue
		}
		labels := []*dto.LabelPair{newLabelPair("name", name), newLabelPair("namespace", ns)}
		metrics = append(metrics,
			counterMetric{desc: releaseLockedDesc, labels: labels, value: boolValue(f.locked), gauge: true},
			counterMetric{desc: helmOperationStuckDesc, labels: labels, value: boolValue(f.stuck), gauge: true},
			counterMetric{desc: reconcileErrorsDesc, labels: labels, value: f.errors})
	}
	for i := range metrics {
		ch <- &metrics[i]
	}
}

package main

import (
	"cmp"
	"context"
	"image/color"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The pictures of deploy/dashboards/helm-locker.json in docs/dashboard.md
// are drawn from the base scenario's scrapes of the locker's /metrics, with
// the dashboard's queries worked out here: rates over rateWindow, quantiles
// from histogram buckets as Prometheus' histogram_quantile does.
const (
	scrapeInterval = 2 * time.Second
	rateWindow     = 10 * time.Second
)

// recording scrapes the locker's /metrics every interval (scrapeInterval
// if zero) until stopped. A nil *recording records nothing.
type recording struct {
	interval time.Duration
	start    time.Time
	cancel   context.CancelFunc
	done     chan struct{}
	scrapes  []scrape
}

// scrape is one read of /metrics: each series' value, keyed by its name
// and labels as the locker writes them.
type scrape struct {
	at     time.Time
	series map[string]float64
}

// record starts scraping l, until stop or the end of ctx.
func (r *recording) record(ctx context.Context, l *locker) {
	if r == nil {
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.start, r.done = l.start, make(chan struct{})
	go func() {
		defer close(r.done)
		tick := time.NewTicker(cmp.Or(r.interval, scrapeInterval))
		defer tick.Stop()
		for {
			// The first scrapes fail until the locker serves.
			if lines, err := l.metrics(ctx); err == nil {
				r.scrapes = append(r.scrapes, parseScrape(time.Now(), lines))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// stop ends the scraping and waits for it to end.
func (r *recording) stop() {
	if r == nil || r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
}

func parseScrape(at time.Time, lines []string) scrape {
	s := scrape{at: at, series: map[string]float64{}}
	for _, line := range lines {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			s.series[line[:i]] = v
		}
	}
	return s
}

// metricOf and labelOf read a series key as parseScrape keeps it; a
// label the series lacks, or "", reads as "".
func metricOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		return key[:i]
	}
	return key
}

func labelOf(key, l string) string {
	if l == "" {
		return ""
	}
	i := strings.Index(key, "{"+l+`="`)
	if i < 0 {
		i = strings.Index(key, ","+l+`="`)
	}
	if i < 0 {
		return ""
	}
	v, _, _ := strings.Cut(key[i+len(l)+3:], `"`)
	return v
}

// sumBy is `sum by (l) (metric)` at scrape i: the series of metric added
// up by their value of l.
func (r *recording) sumBy(i int, metric, l string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range r.scrapes[i].series {
		if metricOf(k) == metric {
			out[labelOf(k, l)] += v
		}
	}
	return out
}

// rateBy is `sum by (l) (rate(metric[rateWindow]))` at scrape i: each
// series' increase from its first sample in the window, per second, added
// up by their value of l. As in Prometheus, a series needs two samples
// in the window, so the first increment of one that appears with a value
// (a counter with labels, at its first increment) is not seen; unlike
// Prometheus, the rate is not extrapolated to the window's ends.
func (r *recording) rateBy(i int, metric, l string) map[string]float64 {
	now := r.scrapes[i]
	first := i // the window is (now - rateWindow, now]
	for first > 0 && now.at.Sub(r.scrapes[first-1].at) < rateWindow {
		first--
	}
	out := map[string]float64{}
	for k, v := range now.series {
		if metricOf(k) != metric {
			continue
		}
		for _, from := range r.scrapes[first:i] {
			if v0, ok := from.series[k]; ok {
				out[labelOf(k, l)] += (v - v0) / now.at.Sub(from.at).Seconds()
				break
			}
		}
	}
	return out
}

// quantile is `histogram_quantile(q, sum by (le) (rate(metric_bucket[rateWindow])))`
// at scrape i, in Prometheus' way: linear within the bucket that holds
// the rank, the highest finite bound for a rank in +Inf's, NaN without
// observations.
func (r *recording) quantile(i int, q float64, metric string) float64 {
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for le, count := range r.rateBy(i, metric+"_bucket", "le") {
		bound, err := strconv.ParseFloat(le, 64)
		if err == nil {
			buckets = append(buckets, bucket{bound, count})
		}
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	n := len(buckets)
	if n < 2 || !math.IsInf(buckets[n-1].le, 1) || buckets[n-1].count <= 0 {
		return math.NaN()
	}
	rank := q * buckets[n-1].count
	b := slices.IndexFunc(buckets, func(x bucket) bool { return x.count >= rank })
	if b == n-1 {
		return buckets[n-2].le
	}
	lower, count := 0.0, buckets[b].count
	if b > 0 {
		lower, count, rank = buckets[b-1].le, count-buckets[b-1].count, rank-buckets[b-1].count
	}
	return lower + (buckets[b].le-lower)*rank/count
}

// panel is one of the dashboard's panels: lines by name, each a value per
// scrape (NaN or none where the query has none), on a log scale if log.
type panel struct {
	title, unit string
	log         bool
	lines       func(r *recording, i int) map[string]float64
}

// dashboardPanels are the dashboard's main panels, each with its query.
var dashboardPanels = []panel{
	{"Locked objects", "objects", false, func(r *recording, i int) map[string]float64 {
		return map[string]float64{"objects": r.sumBy(i, "helm_locker_locked_objects", "")[""]}
	}},
	{"Locked releases", "releases", false, func(r *recording, i int) map[string]float64 {
		return map[string]float64{"releases": r.sumBy(i, "helm_locker_locked_releases", "")[""]}
	}},
	{"Drifts detected and corrected by kind", "per second", false, func(r *recording, i int) map[string]float64 {
		out := map[string]float64{}
		for kind, v := range r.rateBy(i, "helm_locker_drift_detected_total", "kind") {
			out[kind+" detected"] = v
		}
		for kind, v := range r.rateBy(i, "helm_locker_drift_corrected_total", "kind") {
			out[kind+" corrected"] = v
		}
		return out
	}},
	{"Revert latency", "milliseconds, log scale", true, func(r *recording, i int) map[string]float64 {
		out := map[string]float64{}
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
			out[q.name] = 1000 * r.quantile(i, q.q, "helm_locker_revert_latency_seconds")
		}
		return out
	}},
	{"Work queue depth", "items", false, func(r *recording, i int) map[string]float64 {
		return r.sumBy(i, "workqueue_depth", "name")
	}},
	{"API server requests by method", "per second", false, func(r *recording, i int) map[string]float64 {
		return r.rateBy(i, "rest_client_requests_total", "method")
	}},
}

// plainTicks are plot's default ticks, labelled without trailing zeros.
var plainTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', -1, 64)
		}
	}
	return ticks
})

var palette = []color.RGBA{
	{R: 30, G: 100, B: 200, A: 255}, {R: 200, G: 60, B: 40, A: 255}, {R: 40, G: 150, B: 60, A: 255},
	{R: 150, G: 80, B: 170, A: 255}, {R: 220, G: 140, B: 20, A: 255}, {R: 90, G: 90, B: 90, A: 255},
}

// plotDashboard draws dashboardPanels from r's scrapes, two a row, over
// the seconds since the locker started.
func plotDashboard(path string, r *recording) error {
	const cols = 2
	rows := (len(dashboardPanels) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for k, panel := range dashboardPanels {
		p, err := panel.plot(r)
		if err != nil {
			return err
		}
		plots[k/cols] = append(plots[k/cols], p)
	}
	img := vgimg.New(12*vg.Inch, vg.Length(rows)*3.5*vg.Inch)
	pad := 2 * vg.Millimeter
	canvases := plot.Align(plots, draw.Tiles{Rows: rows, Cols: cols, PadX: 2 * pad, PadY: 2 * pad,
		PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}, draw.New(img))
	for i := range plots {
		for j, p := range plots[i] {
			p.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plot draws the panel's lines over r's scrapes. A line breaks where its
// query has no value, as Grafana's do.
func (panel panel) plot(r *recording) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = panel.title
	p.X.Label.Text = "seconds since the locker started"
	p.Y.Label.Text = panel.unit
	p.X.Tick.Marker = plainTicks
	if panel.log {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min, p.Y.Tick.Marker = 0, plainTicks
	}
	segments := map[string][]plotter.XYs{} // by name, of consecutive scrapes
	last := map[string]int{}
	for i, s := range r.scrapes {
		for name, v := range panel.lines(r, i) {
			if math.IsNaN(v) {
				continue
			}
			if j, ok := last[name]; !ok || j != i-1 {
				segments[name] = append(segments[name], nil)
			}
			last[name] = i
			seg := segments[name]
			seg[len(seg)-1] = append(seg[len(seg)-1], plotter.XY{X: s.at.Sub(r.start).Seconds(), Y: v})
		}
	}
	for j, name := range slices.Sorted(maps.Keys(segments)) {
		for n, seg := range segments[name] {
			line, err := plotter.NewLine(seg)
			if err != nil {
				return nil, err
			}
			line.Color = palette[j%len(palette)]
			line.Width = vg.Points(1.5)
			if j%2 == 1 {
				// Lines that coincide (detected and corrected)
				// both show.
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(line)
			if n == 0 && len(segments) > 1 {
				p.Legend.Add(name, line)
			}
		}
	}
	// Room above the lines for the legend, and one time axis for all
	// panels.
	p.Legend.Top = true
	p.Y.Max *= 1.3
	if panel.log {
		p.Y.Max *= 3
	}
	p.X.Min, p.X.Max = 0, r.scrapes[len(r.scrapes)-1].at.Sub(r.start).Seconds()
	p.Add(plotter.NewGrid())
	return p, nil
}

package main

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestQueriesAsPrometheus holds the bench's reading of its scrapes to what
// Prometheus answers for the same samples: rate per series, a series
// needing two samples in the window, and histogram_quantile's linear
// interpolation within a bucket.
func TestQueriesAsPrometheus(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &recording{scrapes: []scrape{
		parseScrape(t0, []string{
			`# TYPE c counter`,
			`c{kind="A"} 1`,
			`h_bucket{le="1"} 0`, `h_bucket{le="2"} 0`, `h_bucket{le="+Inf"} 0`,
		}),
		parseScrape(t0.Add(2*time.Second), []string{
			`c{kind="A"} 5`,
			`c{kind="B"} 1`, // appears at its first increment
			`h_bucket{le="1"} 4`, `h_bucket{le="2"} 8`, `h_bucket{le="+Inf"} 10`,
		}),
	}}
	if diff := cmp.Diff(map[string]float64{"A": 2}, r.rateBy(1, "c", "kind")); diff != "" {
		t.Errorf("rate (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ q, want float64 }{
		{0.2, 0.5}, // rank 1 of the 2 per second in (0, 1]
		{0.6, 1.5}, // rank 3: 1 of the 2 per second in (1, 2]
		{0.99, 2},  // in +Inf's bucket: the highest finite bound
	} {
		if got := r.quantile(1, c.q, "h"); got != c.want {
			t.Errorf("quantile %v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := r.quantile(0, 0.5, "h"); !math.IsNaN(got) {
		t.Errorf("quantile with one sample = %v, want NaN", got)
	}
}

package metrics

import (
	"strings"
	"testing"
)

// TestWatchesCurrent: the gauge says, at each scrape, what watching says
// then.
func TestWatchesCurrent(t *testing.T) {
	m := New(nil)
	current := true
	m.ReportWatching(func() bool { return current })
	for _, tc := range []struct {
		current bool
		want    string
	}{{true, "helm_locker_watches_current 1"}, {false, "helm_locker_watches_current 0"}, {true, "helm_locker_watches_current 1"}} {
		current = tc.current
		if body := scrape(t, m); !strings.Contains(body, tc.want) {
			t.Errorf("watching %v: metrics lack %s", tc.current, tc.want)
		}
	}
	var none *Metrics
	none.ReportWatching(func() bool { return true })
}

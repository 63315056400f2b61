package metrics

import (
	"strings"
	"testing"
	"time"
)

// TestRenderSeries: every render result is there at 0 before the first
// render; a render counts under its result and sets the release's
// staleness; a failed render leaves the staleness as it was; forgetting
// the release drops its staleness and no other's.
func TestRenderSeries(t *testing.T) {
	m := New(nil)
	body := scrape(t, m)
	for _, result := range RenderResults {
		if want := `helm_locker_renders_total{result="` + result + `"} 0`; !strings.Contains(body, want) {
			t.Errorf("before any render, metrics lack %s", want)
		}
	}
	steps := []struct {
		release, result string
		want            []string
	}{
		{"web", "Current", []string{`helm_locker_render_stale{namespace="apps",release="web"} 0`, `helm_locker_renders_total{result="Current"} 1`}},
		{"web", "Stale", []string{`helm_locker_render_stale{namespace="apps",release="web"} 1`, `helm_locker_renders_total{result="Stale"} 1`}},
		{"web", "Forbidden", []string{`helm_locker_render_stale{namespace="apps",release="web"} 1`, `helm_locker_renders_total{result="Forbidden"} 1`}},
		{"shop", "Current", []string{`helm_locker_render_stale{namespace="apps",release="shop"} 0`, `helm_locker_render_duration_seconds_count 4`}},
	}
	for _, s := range steps {
		m.ObserveRender("apps", s.release, s.result, time.Millisecond)
		body := scrape(t, m)
		for _, want := range s.want {
			if !strings.Contains(body, want) {
				t.Errorf("after a %s render of %s, metrics lack %s", s.result, s.release, want)
			}
		}
	}
	m.ForgetRender("apps", "web")
	body = scrape(t, m)
	if strings.Contains(body, `release="web"`) || !strings.Contains(body, `release="shop"`) {
		t.Errorf("after forgetting web, want only shop's staleness:\n%s", body)
	}
	var none *Metrics
	none.ObserveRender("apps", "web", "Stale", time.Second)
	none.ForgetRender("apps", "web")
}

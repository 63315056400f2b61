package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/internal/admission"
)

var _ admission.Observer = (*Metrics)(nil)

// TestWebhookMetrics: the shed series exist at 0 from the start, and the
// timestamps are those last given; a nil *Metrics records nothing.
func TestWebhookMetrics(t *testing.T) {
	scrape := func(m *Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	m := New(nil)
	for _, want := range []string{
		`helm_locker_admission_reviews_shed_total{reason="Busy"} 0`,
		`helm_locker_admission_reviews_shed_total{reason="TooLarge"} 0`,
		`helm_locker_admission_reviews_shed_total{reason="SlowBody"} 0`,
		`helm_locker_admission_reviews_shed_total{reason="Mismatch"} 0`,
		`helm_locker_webhook_last_review_timestamp_seconds 0`,
		`helm_locker_webhook_probe_answered_timestamp_seconds 0`,
	} {
		if body := scrape(m); !strings.Contains(body, want) {
			t.Errorf("a new registry lacks %s", want)
		}
	}
	m.Shed(admission.ShedBusy)
	m.Answered(time.Unix(1700000000, 0))
	m.ProbeAnswered(time.Unix(1700000060, 0))
	for _, want := range []string{
		`helm_locker_admission_reviews_shed_total{reason="Busy"} 1`,
		`helm_locker_webhook_last_review_timestamp_seconds 1.7e+09`,
		`helm_locker_webhook_probe_answered_timestamp_seconds 1.70000006e+09`,
	} {
		if body := scrape(m); !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var none *Metrics
	none.Shed(admission.ShedBusy)
	none.Answered(time.Now())
	none.ProbeAnswered(time.Now())
}

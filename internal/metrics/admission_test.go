package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdmissionMetrics: denials count by release and kind, and reviews by
// their answer; a nil *Metrics records nothing and does not fail.
func TestAdmissionMetrics(t *testing.T) {
	m := New(nil)
	m.Denied("apps", "web", "ConfigMap")
	m.Denied("apps", "web", "ConfigMap")
	m.Reviewed(false)
	m.Reviewed(true)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="web"} 2`,
		`helm_locker_admission_reviews_total{allowed="false"} 1`,
		`helm_locker_admission_reviews_total{allowed="true"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var none *Metrics
	none.Denied("apps", "web", "ConfigMap")
	none.Reviewed(true)
}

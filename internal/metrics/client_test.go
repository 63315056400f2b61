package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestClientRequestsAreServed(t *testing.T) {
	m := New(nil)
	ctx := context.Background()
	m.client.Increment(ctx, "200", "PUT", "10.0.0.1:6443")
	m.client.Increment(ctx, "200", "PUT", "10.0.0.1:6443")
	m.client.Increment(ctx, "200", "WATCH", "10.0.0.1:6443")
	u, _ := url.Parse("https://10.0.0.1:6443/apis/coordination.k8s.io/v1/namespaces/ns/leases/locker")
	(*clientLatency)(m.client).Observe(ctx, "PUT", *u, 5*time.Millisecond)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`rest_client_requests_total{code="200",host="10.0.0.1:6443",method="PUT"} 2`,
		`rest_client_requests_total{code="200",host="10.0.0.1:6443",method="WATCH"} 1`,
		// The path, which names the object, is not a label.
		`rest_client_request_duration_seconds_count{host="10.0.0.1:6443",verb="PUT"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

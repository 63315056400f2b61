package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/internal/metrics"
)

// TestClientRequestsCounted: the binary's requests to the API server reach
// rest_client_requests_total, with every library it links: Helm 4's SDK
// brings controller-runtime, whose init registers client-go's request
// hooks first.
func TestClientRequestsCounted(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`)
	}))
	t.Cleanup(server.Close)
	m := metrics.New(nil)
	m.ReportClientRequests()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	host := strings.TrimPrefix(server.URL, "http://")
	if want := `rest_client_requests_total{code="200",host="` + host + `",method="GET"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

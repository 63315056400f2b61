package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/internal/admission"
)

type probeTimes []time.Time

func (p *probeTimes) ProbeAnswered(at time.Time) { *p = append(*p, at) }

// TestProbe: a probe is a dry-run create of the Lease, labelled for the
// probe webhook; it counts as answered only when the API server's response
// carries the webhook's warning, which nothing but the webhook's answer to
// that request puts there.
func TestProbe(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		warning  string
		status   int
		answered bool
		wantErr  func(error) bool
	}{
		{name: "the webhook answered", warning: `299 - "` + admission.ProbeWarning + `"`, status: http.StatusCreated, answered: true},
		{name: "the API server did not reach the webhook", status: http.StatusCreated,
			wantErr: func(err error) bool { var e *NotAnsweredError; return errors.As(err, &e) }},
		{name: "another webhook's warning", warning: `299 - "something else"`, status: http.StatusCreated,
			wantErr: func(err error) bool { var e *NotAnsweredError; return errors.As(err, &e) }},
		{name: "the API server refused", status: http.StatusForbidden,
			wantErr: func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "Lease ns/hl-admission-probe")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *http.Request
			var body string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r
				b, _ := io.ReadAll(r.Body)
				body = string(b)
				if tt.warning != "" {
					w.Header().Add("Warning", tt.warning)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				if tt.status >= 300 {
					_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
					return
				}
				_, _ = io.WriteString(w, `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"hl-admission-probe","namespace":"ns"}}`)
			}))
			defer srv.Close()
			kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, WarningHandler: rest.NoWarnings{}})
			if err != nil {
				t.Fatal(err)
			}
			seen := &probeTimes{}
			p := &Probe{Kube: kube, Namespace: "ns", Name: "hl-admission-probe", Observer: seen, Now: func() time.Time { return at }}
			err = p.Check(context.Background())
			if got == nil || got.Method != http.MethodPost || got.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/ns/leases" || got.URL.Query().Get("dryRun") != "All" ||
				!strings.Contains(body, `"`+ProbeLabel+`":"true"`) {
				t.Fatalf("the probe sent %v %v with %s; want a dry-run create of a Lease labelled %s", got.Method, got.URL, body, ProbeLabel)
			}
			last, _ := p.Answered()
			if tt.answered != (err == nil) || tt.answered != last.Equal(at) || tt.answered != (len(*seen) == 1) {
				t.Errorf("Check = %v, last answered %v, observed %v; want answered %v", err, last, *seen, tt.answered)
			}
			if tt.wantErr != nil && !tt.wantErr(err) {
				t.Errorf("Check = %v, not the error wanted", err)
			}
		})
	}
}

package framework

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

func TestIsWatch(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  bool
	}{
		{"watch=true", true},
		{"watch=1", true},
		{"watch=", true}, // the API server counts any other value as true
		{"watch=0", false},
		{"watch=false", false},
		{"watch=False", false},
		{"resourceVersion=1", false},
		{"", false},
	} {
		query, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := isWatch(query); got != tc.want {
			t.Errorf("isWatch(%q) = %v, want %v", tc.query, got, tc.want)
		}
	}
}

// TestProxyBlocksWatches runs the proxy in front of a stand-in for
// kube-apiserver that streams one line and then holds watches open.
func TestProxyBlocksWatches(t *testing.T) {
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "event\n")
		w.(http.Flusher).Flush()
		if isWatch(r.URL.Query()) {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(upstream.Close)
	env := &Env{CP: &controlplane.ControlPlane{Config: &rest.Config{Host: upstream.URL, BearerToken: "admin-token"}}}
	proxy := env.StartProxy(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", proxy.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(query string) *http.Response {
		t.Helper()
		resp, err := client.Get(cfg.Host + "/api/v1/configmaps?" + query)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	watch := get("watch=true")
	body := bufio.NewReader(watch.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "event\n" {
		t.Fatalf("first line of the watch: %q, %v", line, err)
	}
	if n := proxy.Watches(); n != 1 {
		t.Fatalf("Watches() = %d with one watch open", n)
	}

	// The cut ends the response, cleanly or not depending on where the
	// proxy was in it; either way the client's watch ends.
	ended := make(chan struct{})
	go func() {
		_, _ = io.ReadAll(body)
		close(ended)
	}()
	proxy.BlockWatches(true)
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the open watch was not cut")
	}
	if n := proxy.Watches(); n != 0 {
		t.Errorf("Watches() = %d after blocking", n)
	}
	refused := get("watch=1")
	got, _ := io.ReadAll(refused.Body)
	if refused.StatusCode != http.StatusServiceUnavailable || string(got) != blockedStatus ||
		refused.Header.Get("Content-Type") != "application/json" || refused.Header.Get("Retry-After") != "" {
		t.Errorf("blocked watch: %s %q, headers %v", refused.Status, got, refused.Header)
	}
	if list := get(""); list.StatusCode != http.StatusOK {
		t.Errorf("list while watches are blocked: %s", list.Status)
	}

	proxy.BlockWatches(false)
	if again := get("watch=true"); again.StatusCode != http.StatusOK {
		t.Errorf("watch after unblocking: %s", again.Status)
	}
	if n := proxy.Watches(); n != 1 {
		t.Errorf("Watches() = %d after unblocking and watching again", n)
	}
}

package framework

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
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

func TestWatchedResource(t *testing.T) {
	for _, tc := range []struct {
		path string
		want schema.GroupResource
		ok   bool
	}{
		{"/api/v1/secrets", schema.GroupResource{Resource: "secrets"}, true},
		{"/api/v1/namespaces/apps/secrets", schema.GroupResource{Resource: "secrets"}, true},
		{"/api/v1/namespaces", schema.GroupResource{Resource: "namespaces"}, true},
		{"/apis/apps/v1/deployments", schema.GroupResource{Group: "apps", Resource: "deployments"}, true},
		{"/apis/apps/v1/namespaces/apps/deployments", schema.GroupResource{Group: "apps", Resource: "deployments"}, true},
		{"/api/v1/namespaces/apps/secrets/one", schema.GroupResource{}, false},
		{"/api/v1", schema.GroupResource{}, false},
		{"/apis/apps/v1", schema.GroupResource{}, false},
		{"/version", schema.GroupResource{}, false},
	} {
		got, ok := watchedResource(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("watchedResource(%q) = %v, %v; want %v, %v", tc.path, got, ok, tc.want, tc.ok)
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
	proxy, getPath := startTestProxy(t, upstream.URL)
	get := func(query string) *http.Response {
		t.Helper()
		return getPath("/api/v1/configmaps?" + query)
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

// startTestProxy starts a Proxy in front of the stand-in for kube-apiserver
// at url, and returns it with a function that GETs a path through it.
func startTestProxy(t *testing.T, url string) (*Proxy, func(path string) *http.Response) {
	t.Helper()
	env := &Env{CP: &controlplane.ControlPlane{Config: &rest.Config{Host: url, BearerToken: "admin-token"}}}
	proxy := env.StartProxy(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", proxy.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return proxy, func(path string) *http.Response {
		t.Helper()
		resp, err := client.Get(cfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}

// lines reads a response body line by line, in the background.
func lines(body io.Reader) <-chan string {
	out := make(chan string, 10)
	go func() {
		defer close(out)
		r := bufio.NewReader(body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			out <- line
		}
	}()
	return out
}

// TestProxyPausesWatches runs the proxy in front of a stand-in for
// kube-apiserver that answers each request with a line, and each watch
// with a second line once the test says so.
func TestProxyPausesWatches(t *testing.T) {
	later := make(chan struct{})
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		if !isWatch(r.URL.Query()) {
			return
		}
		select {
		case <-later:
			_, _ = io.WriteString(w, "second\n")
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	}))
	t.Cleanup(upstream.Close)
	proxy, get := startTestProxy(t, upstream.URL)
	secrets := schema.GroupResource{Resource: "secrets"}
	next := func(what string, lines <-chan string, want string) {
		t.Helper()
		select {
		case got := <-lines:
			if got != want {
				t.Errorf("%s: %q, want %q", what, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no %q", what, want)
		}
	}

	before := lines(get("/api/v1/namespaces/apps/secrets?watch=true").Body)
	next("secrets watched before the pause", before, "first\n")
	proxy.PauseWatches(secrets, true)
	proxy.PauseWatches(secrets, true) // pausing twice is pausing
	opened := get("/api/v1/secrets?watch=true")
	if opened.StatusCode != http.StatusOK {
		t.Errorf("a watch opened while paused: %s, want it open", opened.Status)
	}
	during := lines(opened.Body)
	others := lines(get("/api/v1/configmaps?watch=true").Body)
	next("configmaps watched while secrets are paused", others, "first\n")
	next("secrets listed while paused", lines(get("/api/v1/secrets").Body), "first\n")

	close(later)
	next("configmaps watched while secrets are paused", others, "second\n")
	// Both upstream watches of secrets have sent their lines by now, or
	// are about to: held back, none may arrive.
	select {
	case got := <-before:
		t.Errorf("a paused watch opened before the pause passed %q", got)
	case got := <-during:
		t.Errorf("a paused watch opened during the pause passed %q", got)
	case <-time.After(300 * time.Millisecond):
	}
	if n := proxy.Watches(); n != 3 {
		t.Errorf("Watches() = %d with three watches open, two of them paused", n)
	}

	proxy.PauseWatches(secrets, false)
	next("secrets watched before the pause, after it", before, "second\n")
	next("secrets watched during the pause, after it", during, "first\n")
	next("secrets watched during the pause, after it", during, "second\n")
}

// TestProxyAnswersVersion: once told, /version answers with the version
// given, as discovery reads it, and every other path still reaches the API
// server; told "", /version reaches it again.
func TestProxyAnswersVersion(t *testing.T) {
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"gitVersion":"upstream"}`)
	}))
	t.Cleanup(upstream.Close)
	proxy, get := startTestProxy(t, upstream.URL)
	read := func(path string) string {
		t.Helper()
		b, err := io.ReadAll(get(path).Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	proxy.AnswerVersion("v1.37.2")
	var v version.Info
	if err := json.Unmarshal([]byte(read("/version")), &v); err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" {
		t.Errorf("/version answered %+v, want v1.37.2, major 1, minor 37", v)
	}
	if got := read("/api"); got != `{"gitVersion":"upstream"}` {
		t.Errorf("/api answered %q, want the API server's answer", got)
	}
	proxy.AnswerVersion("")
	if got := read("/version"); got != `{"gitVersion":"upstream"}` {
		t.Errorf("/version answered %q after AnswerVersion(\"\"), want the API server's answer", got)
	}
}

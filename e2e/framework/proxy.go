package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// Proxy is a TLS reverse proxy in front of the control plane's
// kube-apiserver. A locker that reaches the API server through it can have
// its watches broken and refused, or one resource's watches paused, while
// every other request still works, which stopping kube-apiserver cannot do.
type Proxy struct {
	server     *httptest.Server
	kubeconfig string

	mu      sync.Mutex
	blocked bool
	// watches cancels each watch being proxied, ending its response.
	watches map[*http.Request]context.CancelFunc
	// paused holds, for each resource whose watches are paused, a
	// channel closed when they resume.
	paused map[schema.GroupResource]chan struct{}
	// delays holds, by path, how long each GET of an object is held back.
	delays map[string]time.Duration
	// version, if set, is the gitVersion /version answers with.
	version string
}

// blockedStatus is what a refused watch gets: the Status an API server sends
// when it is unavailable, but without the Retry-After header it would add,
// because client-go retries such a response itself and the locker would
// never see the failure.
const blockedStatus = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"watches blocked by the test proxy","reason":"ServiceUnavailable","code":503}`

// StartProxy starts a Proxy on a loopback port, serving a self-signed
// certificate that clients skip verifying, as they do the control plane's.
// It is closed when the test ends, cutting every connection through it,
// watches and upgraded connections included.
func (e *Env) StartProxy(t testing.TB) *Proxy {
	t.Helper()
	upstream, err := url.Parse(e.CP.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	reverse := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport: transport,
		// Watches are chunked responses that stay open; each event must
		// reach the client when it happens.
		FlushInterval: -1,
		// Cut watches and an API server that is down are what the proxy
		// is for; logging each would bury the test's output.
		ErrorLog: log.New(io.Discard, "", 0),
	}

	// closing ends every request still open when the test ends; the
	// server's Close would otherwise wait for watches to time out.
	closing, closeAll := context.WithCancel(context.Background())
	var handlers sync.WaitGroup
	p := &Proxy{watches: map[*http.Request]context.CancelFunc{}, paused: map[schema.GroupResource]chan struct{}{}, delays: map[string]time.Duration{}}
	p.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(closing, cancel)()
		r = r.WithContext(ctx)
		if isWatch(r.URL.Query()) {
			if !p.addWatch(r, cancel) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, blockedStatus)
				return
			}
			defer p.removeWatch(r)
			if resource, ok := watchedResource(r.URL.Path); ok {
				w = &pausableWriter{ResponseWriter: w, ctx: ctx, paused: func() <-chan struct{} { return p.pausedUntil(resource) }}
			}
		} else if v := p.servedVersion(); v != "" && r.URL.Path == "/version" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"major":%q,"minor":%q,"gitVersion":%q,"platform":"linux/amd64"}`, versionPart(v, 0), versionPart(v, 1), v)
			return
		} else if d := p.readDelay(r); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
		reverse.ServeHTTP(w, r)
	}))
	p.server.Config.ErrorLog = reverse.ErrorLog
	p.server.StartTLS()
	t.Cleanup(func() {
		closeAll()
		p.server.Close()
		// Close does not wait for handlers of upgraded connections.
		handlers.Wait()
		transport.CloseIdleConnections()
	})

	cfg := rest.CopyConfig(e.CP.Config)
	cfg.Host = p.server.URL
	p.kubeconfig = filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := controlplane.WriteKubeconfig(p.kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// AnswerVersion makes /version answer with gitVersion, such as "v1.37.0",
// as an API server upgraded in place would; "" passes /version through
// again.
func (p *Proxy) AnswerVersion(gitVersion string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version = gitVersion
}

func (p *Proxy) servedVersion() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// versionPart is the i-th number of a version "v1.37.0": "1", "37".
func versionPart(v string, i int) string {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// Kubeconfig is the path of a cluster admin's kubeconfig that reaches the
// API server through the proxy, for StartLockerWith.
func (p *Proxy) Kubeconfig() string { return p.kubeconfig }

// BlockWatches starts or stops refusing watches. Starting ends every watch
// open through the proxy at once, as a broken connection would, and answers
// each new one with 503 Service Unavailable; other requests still pass.
func (p *Proxy) BlockWatches(block bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = block
	if block {
		for _, cancel := range p.watches {
			cancel()
		}
	}
}

// PauseWatches holds back, or lets through again, the events of every watch
// of resource through the proxy, open or opened while paused. A paused
// watch stays open and error-free, so its client's cache stays healthy but
// stale, as it is when one stream of events lags behind the others; lists,
// reads and writes of the resource still pass. BlockWatches, by contrast,
// makes the client's watch fail, which a client can notice. Held events
// back up into the API server as a slow client's would, so pauses should
// last seconds, not minutes.
func (p *Proxy) PauseWatches(resource schema.GroupResource, pause bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resumed, paused := p.paused[resource]
	switch {
	case pause && !paused:
		p.paused[resource] = make(chan struct{})
	case !pause && paused:
		close(resumed)
		delete(p.paused, resource)
	}
}

// DelayReads holds back each GET of the object at path (such as
// /api/v1/namespaces/NS/configmaps/NAME) through the proxy by d, as a busy
// client or API server would; zero lets them through at once again. Lists,
// watches and writes are not held back.
func (p *Proxy) DelayReads(path string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		delete(p.delays, path)
		return
	}
	p.delays[path] = d
}

// readDelay is how long r, if it reads one object, is held back.
func (p *Proxy) readDelay(r *http.Request) time.Duration {
	if r.Method != http.MethodGet {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delays[r.URL.Path]
}

// pausedUntil returns the channel closed when resource's watches resume,
// or nil if they are not paused.
func (p *Proxy) pausedUntil(resource schema.GroupResource) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if resumed, ok := p.paused[resource]; ok {
		return resumed
	}
	return nil
}

// pausableWriter is the response to a watch. While paused returns a
// channel, its body waits for that channel to close, or the request to end.
type pausableWriter struct {
	http.ResponseWriter
	ctx    context.Context
	paused func() <-chan struct{}
}

// WriteHeader sends the headers at once, as the API server does when a
// watch starts, so that a watch opened while paused is open, not pending.
func (w *pausableWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *pausableWriter) Write(b []byte) (int, error) {
	// Paused again between the close and this check, it waits again.
	for resumed := w.paused(); resumed != nil; resumed = w.paused() {
		select {
		case <-resumed:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets the reverse proxy flush each event as it is written.
func (w *pausableWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Watches is the number of watches open through the proxy, for tests that
// wait for a client to have watched again.
func (p *Proxy) Watches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// addWatch records a watch with the cancel that ends it, and reports false,
// recording nothing, while watches are blocked.
func (p *Proxy) addWatch(r *http.Request, cancel context.CancelFunc) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		return false
	}
	p.watches[r] = cancel
	return true
}

func (p *Proxy) removeWatch(r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watches, r)
}

// isWatch reports whether a request's query asks for a watch, by the API
// server's own rule for boolean parameters (runtime.Convert_Slice_string_To_bool):
// present and neither "0" nor "false".
func isWatch(query url.Values) bool {
	v := query["watch"]
	return len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// watchedResource returns the resource a watch's collection path names:
// /api/v1/[namespaces/NS/]RESOURCE or
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE.
func watchedResource(path string) (schema.GroupResource, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return schema.GroupResource{}, false
	}
	if len(parts) == 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) != 1 || parts[0] == "" {
		return schema.GroupResource{}, false
	}
	return schema.GroupResource{Group: group, Resource: parts[0]}, true
}

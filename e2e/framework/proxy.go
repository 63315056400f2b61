package framework

import (
	"context"
	"crypto/tls"
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

	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// Proxy is a TLS reverse proxy in front of the control plane's
// kube-apiserver. A locker that reaches the API server through it can have
// its watches broken and refused while every other request still works,
// which stopping kube-apiserver cannot do.
type Proxy struct {
	server     *httptest.Server
	kubeconfig string

	mu      sync.Mutex
	blocked bool
	// watches cancels each watch being proxied, ending its response.
	watches map[*http.Request]context.CancelFunc
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
	p := &Proxy{watches: map[*http.Request]context.CancelFunc{}}
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

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// serveHTTP serves handler on addr until ctx is done. An addr of "0" or ""
// serves nothing. The listener is opened at once, so a port in use is an
// error at startup rather than a log line later.
func serveHTTP(ctx context.Context, wg *sync.WaitGroup, what, addr string, handler http.Handler) error {
	if addr == "" || addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serving %s on %s: %w", what, addr, err)
	}
	klog.FromContext(ctx).Info("Serving "+what, "address", ln.Addr().String())
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped", "serving", what)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	return nil
}

// healthHandler serves /healthz, which is OK while the process runs, and
// /readyz, which is OK once ready says so.
func healthHandler(ready func() (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := ready()
		if !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(why + "\n"))
	})
	return mux
}

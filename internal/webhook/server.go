package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Server serves the webhook over TLS with the certificate Certs gives,
// read again every Refresh so that a renewal is served without a restart.
type Server struct {
	Addr    string
	Handler http.Handler
	Certs   CertSource
	Refresh time.Duration
}

// Start listens at once, so that a port in use is an error at startup,
// and serves in a goroutine of wg until ctx is done. Until a certificate
// is read, handshakes fail and the API server lets requests through.
func (s *Server) Start(ctx context.Context, wg *sync.WaitGroup) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("serving the webhook on %s: %w", s.Addr, err)
	}
	wg.Go(func() {
		if err := s.serve(ctx, ln); err != nil {
			klog.FromContext(ctx).Error(err, "The webhook server stopped")
		}
	})
	return nil
}

func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	logger.Info("Serving the admission webhook", "address", ln.Addr().String())
	var current atomic.Pointer[tls.Certificate]
	srv := &http.Server{
		Handler: s.Handler,
		// The API server gives up on the webhook after Timeout seconds,
		// so a request still being read then is useless to answer; a
		// client that sends slowly holds a connection no longer than
		// that, and a slot of the handler's no longer than its
		// MaxBodyRead (admission.DefaultMaxBodyRead).
		ReadHeaderTimeout: Timeout * time.Second,
		ReadTimeout:       Timeout * time.Second,
		WriteTimeout:      2 * Timeout * time.Second,
		// The API server keeps its connections to the webhook open
		// between calls; without this, ReadTimeout would close them.
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 64 << 10,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := current.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate yet")
		}},
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	refresh := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdownCtx)
			<-done
			return nil
		case err := <-done:
			return err
		case <-time.After(refresh):
		}
		refresh = s.Refresh
		bundle, err := s.Certs.Current(ctx)
		if err != nil {
			logger.Error(err, "No serving certificate for the webhook; retrying")
			refresh = time.Second
			continue
		}
		current.Store(&bundle.Cert)
	}
}

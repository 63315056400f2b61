package informers

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Readiness tells when the API server serves again after an outage. Lists
// and watches that failed because it was unavailable wait on it and try
// again the moment it is ready, instead of sleeping out client-go's
// reflector backoff, which grows to 30 s over an outage and keeps a lock
// blind for that long after the API server is back.
type Readiness interface {
	// WaitReady returns nil once the API server says it is ready, or
	// ctx's error.
	WaitReady(ctx context.Context) error
}

// probeEvery is how often a Probe asks /readyz while the API server is not
// ready: the 2 s within which reverts must resume after an outage leave
// room for a list, a sync and a write after it.
const probeEvery = 250 * time.Millisecond

// Probe is a Readiness that asks the API server's /readyz, which every
// authenticated client may read (ClusterRole system:public-info-viewer).
// Its waiters share one answer per probeEvery, so a hundred informers
// waiting out an outage cost four requests a second, not four hundred.
type Probe struct {
	client rest.Interface

	mu      sync.Mutex // held while asking, so that waiters share answers
	checked time.Time
	ready   bool
}

var _ Readiness = (*Probe)(nil)

// NewProbe returns a Probe that asks through client, such as a
// discovery client's RESTClient(). It does no I/O.
func NewProbe(client rest.Interface) *Probe { return &Probe{client: client} }

// NewProbeForConfig is NewProbe with a client built from cfg.
func NewProbeForConfig(cfg *rest.Config) (*Probe, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = nil, ""
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	client, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return NewProbe(client), nil
}

// WaitReady polls /readyz every probeEvery until it answers ok.
func (p *Probe) WaitReady(ctx context.Context) error {
	for {
		if p.Ready(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(probeEvery):
		}
	}
}

// Ready reports whether /readyz answered ok, asking at most once per
// probeEvery.
func (p *Probe) Ready(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < probeEvery-10*time.Millisecond {
		return p.ready
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// No retries: a starting API server answers 503 with Retry-After,
	// and client-go would sleep that out inside the call.
	body, err := p.client.Get().AbsPath("/readyz").MaxRetries(0).DoRaw(ctx)
	p.ready = err == nil && string(body) == "ok"
	p.checked = time.Now()
	return p.ready
}

// Unavailable reports whether err says the API server could not be
// reached or could not serve for now (a refused or broken connection, 429
// or 5xx), as opposed to an answer that stays the same however often it is
// asked (403, 404, 410...). Context errors are neither: the caller gave up.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
	}
	return true
}

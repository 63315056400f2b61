package informers

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Health says whether an informer sees its objects as they are now: its
// last list or watch succeeded, and no watch error came since. A lock must
// not claim to hold objects whose changes it cannot see.
type Health struct {
	onChange func(current bool)

	mu      sync.Mutex
	current bool
	err     error // the last list or watch error while not current
}

// NewHealth returns a Health that is not current until the informer's
// first list, and calls onChange (if not nil) with every change. onChange
// runs on the informer's goroutine and must not block.
func NewHealth(onChange func(current bool)) *Health { return &Health{onChange: onChange} }

// Current reports whether the informer is current.
func (h *Health) Current() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current
}

// Err is the error of the last list or watch that failed, while the
// informer is not current: what to tell a user whose lock waits on it, such
// as a list the locker's RBAC forbids.
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *Health) set(current bool) { h.setErr(current, nil) }

// fail marks the informer not current because of err.
func (h *Health) fail(err error) { h.setErr(false, err) }

func (h *Health) setErr(current bool, err error) {
	h.mu.Lock()
	changed := h.current != current
	h.current = current
	if current || err != nil {
		h.err = err
	}
	h.mu.Unlock()
	if changed && h.onChange != nil {
		h.onChange(current)
	}
}

// maxGuardBackoff bounds the wait between calls that fail while the API
// server says it is ready: a single type's list or watch that keeps
// failing (a webhook conversion down, say) costs at most one request per
// 10 s.
const maxGuardBackoff = 10 * time.Second

// minWatchTimeout is the least time a guarded watch asks the API server to
// last before the reflector watches again; each asks for a random time up
// to twice that, so that renewals spread. client-go asks for 5 to 10
// minutes, which cost an idle locker a request a minute for every eight
// types it watches, and the idle cost grew with the charts' kinds. 30 to
// 60 minutes is what kube-apiserver gives a watch that asks for nothing
// (its --min-request-timeout). A watch that fails, or an API server that
// goes away, still ends a watch at once.
const minWatchTimeout = 30 * time.Minute

// Guard wraps lw for a reflector. A list or watch that fails because the
// API server is unavailable (see Unavailable) is not returned to the
// reflector, whose backoff would have grown to 30 s by the end of an
// outage: it waits for ready and is tried again at once, then with a
// backoff of its own while the API server says it is ready yet the call
// still fails. Other errors go to the reflector as they are. health, if
// not nil, follows whether the informer is current; ready, if nil, leaves
// only the backoff. Its watches last 30 to 60 minutes (see
// minWatchTimeout).
func Guard(lw *cache.ListWatch, ready Readiness, health *Health) *cache.ListWatch {
	if health == nil {
		health = NewHealth(nil)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			list, err := retryUnavailable(ctx, ready, health, func() (runtime.Object, error) {
				return lw.ListWithContext(ctx, options)
			})
			if err == nil {
				health.set(true)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			if t := options.TimeoutSeconds; t != nil && time.Duration(*t)*time.Second < minWatchTimeout {
				long := int64((minWatchTimeout + rand.N(minWatchTimeout)) / time.Second)
				options.TimeoutSeconds = &long
			}
			w, err := retryUnavailable(ctx, ready, health, func() (watch.Interface, error) {
				return lw.WatchWithContext(ctx, options)
			})
			if err != nil {
				return nil, err
			}
			// A watch-list streams the objects first, and is current
			// only once the server says they have all been sent.
			initial := options.SendInitialEvents != nil && *options.SendInitialEvents
			if !initial {
				health.set(true)
			}
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				switch {
				case ev.Type == watch.Error && ctx.Err() == nil:
					// Usually 410 Gone: the reflector lists
					// afresh, and until then events are lost.
					// (A watch stopped with its reflector, as a
					// relist stops it, ends in an error too, and
					// says nothing of the informer.)
					health.fail(apierrors.FromObject(ev.Object))
				case initial && ev.Type == watch.Bookmark && initialEventsEnd(ev.Object):
					health.set(true)
				}
				return ev, true
			}), nil
		},
	}
}

// retryUnavailable calls call until it succeeds, fails for a reason other
// than unavailability, or ctx is done.
func retryUnavailable[T any](ctx context.Context, ready Readiness, health *Health, call func() (T, error)) (T, error) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: maxGuardBackoff}
	for first := true; ; first = false {
		v, err := call()
		if err == nil {
			return v, nil
		}
		health.fail(err)
		if !Unavailable(err) || ctx.Err() != nil {
			return v, err
		}
		// The first retry goes as soon as the API server is ready;
		// later ones back off, since it said it was ready and still
		// failed.
		if !first || ready == nil {
			select {
			case <-ctx.Done():
				return v, err
			case <-time.After(backoff.Step()):
			}
		}
		if ready != nil && ready.WaitReady(ctx) != nil {
			return v, err
		}
	}
}

func initialEventsEnd(obj runtime.Object) bool {
	m, ok := obj.(metav1.Object)
	return ok && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// WatchConfig returns a copy of cfg for the clients of guarded informers.
// Their responses lose the Retry-After header, so that client-go returns a
// 429 or 5xx at once instead of sleeping it out inside the call, and Guard
// paces the retry: a kube-apiserver that has just become ready still asks
// custom-resource clients to wait a second while its CRD handler catches
// up, which client-go would spend asleep inside the list.
func WatchConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return dropRetryAfter{rt} })
	return c
}

type dropRetryAfter struct{ http.RoundTripper }

func (d dropRetryAfter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.RoundTripper.RoundTrip(req)
	if resp != nil {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (d dropRetryAfter) WrappedRoundTripper() http.RoundTripper { return d.RoundTripper }

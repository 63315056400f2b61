package informers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// readyAfter is a Readiness that counts its waits and is ready at once.
type readyAfter struct{ waits atomic.Int32 }

func (r *readyAfter) WaitReady(ctx context.Context) error {
	r.waits.Add(1)
	return ctx.Err()
}

var gr = schema.GroupResource{Resource: "configmaps"}

func TestUnavailable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), true},
		{syscall.ECONNRESET, true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{apierrors.NewNotFound(gr, "x"), false},
		{apierrors.NewResourceExpired("too old"), false},
		{context.Canceled, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestGuardWaitsOutUnavailability: a list that fails while the API server
// is down is retried once it is ready, and never reaches the reflector;
// other errors do, at once. Health follows.
func TestGuardWaitsOutUnavailability(t *testing.T) {
	tests := []struct {
		name      string
		errs      []error // returned by the calls before one succeeds
		wantErr   bool
		wantCalls int
		wantWaits int32
	}{
		{name: "up", wantCalls: 1},
		{name: "down, then ready", errs: []error{errors.New("connection refused"), apierrors.NewServiceUnavailable("starting")}, wantCalls: 3, wantWaits: 2},
		{name: "forbidden", errs: []error{apierrors.NewForbidden(gr, "", errors.New("no"))}, wantErr: true, wantCalls: 1},
		{name: "gone", errs: []error{apierrors.NewResourceExpired("too old")}, wantErr: true, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			var changes []bool
			health := NewHealth(func(current bool) { changes = append(changes, current) })
			ready := &readyAfter{}
			lw := Guard(&cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				calls++
				if calls <= len(tt.errs) {
					return nil, tt.errs[calls-1]
				}
				return &unstructured.UnstructuredList{}, nil
			}}, ready, health)
			_, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
			if (err != nil) != tt.wantErr || calls != tt.wantCalls || ready.waits.Load() != tt.wantWaits {
				t.Errorf("List = %v after %d calls and %d waits; want error %v after %d calls and %d waits", err, calls, ready.waits.Load(), tt.wantErr, tt.wantCalls, tt.wantWaits)
			}
			if health.Current() == tt.wantErr {
				t.Errorf("Current() = %v after the list, want %v", health.Current(), !tt.wantErr)
			}
		})
	}
}

func TestGuardGivesUpWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	lw := Guard(&cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		cancel()
		return nil, errors.New("connection refused")
	}}, &readyAfter{}, nil)
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("List succeeded with its context cancelled")
	}
}

// TestGuardHealthErr: a list the API server refuses leaves the informer
// not current with the refusal as its Err, until a list succeeds.
func TestGuardHealthErr(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	health := NewHealth(nil)
	lw := Guard(&cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		if refuse.Load() {
			return nil, apierrors.NewForbidden(gr, "", errors.New("cannot list"))
		}
		return &unstructured.UnstructuredList{}, nil
	}}, &readyAfter{}, health)
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("List = %v, want the Forbidden", err)
	}
	if health.Current() || !apierrors.IsForbidden(health.Err()) {
		t.Errorf("after a refused list: Current() = %v, Err() = %v; want false and the Forbidden", health.Current(), health.Err())
	}
	refuse.Store(false)
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !health.Current() || health.Err() != nil {
		t.Errorf("after a list: Current() = %v, Err() = %v; want true and nil", health.Current(), health.Err())
	}
}

// TestGuardWatchHealth: a resumed watch is current once open; a watch-list
// only once the server says the initial objects are all sent; an error
// event (410 Gone) makes it stale until the next list.
func TestGuardWatchHealth(t *testing.T) {
	yes := true
	for _, initial := range []*bool{nil, &yes} {
		fake := watch.NewFake()
		health := NewHealth(nil)
		lw := Guard(&cache.ListWatch{WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return fake, nil
		}}, &readyAfter{}, health)
		w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5", SendInitialEvents: initial})
		if err != nil {
			t.Fatal(err)
		}
		if got := health.Current(); got != (initial == nil) {
			t.Errorf("initial events %v: Current() = %v once the watch is open", initial != nil, got)
		}
		send := func(ev watch.Event) {
			fake.Action(ev.Type, ev.Object)
			<-w.ResultChan()
		}
		bookmark := &unstructured.Unstructured{}
		bookmark.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		send(watch.Event{Type: watch.Bookmark, Object: bookmark})
		if !health.Current() {
			t.Errorf("initial events %v: not current after the end-of-initial-events bookmark", initial != nil)
		}
		send(watch.Event{Type: watch.Error, Object: &metav1.Status{Code: http.StatusGone, Reason: metav1.StatusReasonExpired}})
		if health.Current() || !apierrors.IsResourceExpired(health.Err()) {
			t.Errorf("initial events %v: after a 410, Current() = %v, Err() = %v", initial != nil, health.Current(), health.Err())
		}
		w.Stop()
	}
}

// TestGuardWatchesLong: the 5 to 10 minutes client-go's reflector asks a
// watch to last become 30 to 60, so that an idle locker renews few
// watches; a longer timeout and none at all are left as they are.
func TestGuardWatchesLong(t *testing.T) {
	seconds := func(d time.Duration) *int64 { s := int64(d / time.Second); return &s }
	tests := []struct {
		name     string
		timeout  *int64
		min, max time.Duration
	}{
		{name: "client-go's least", timeout: seconds(5 * time.Minute), min: minWatchTimeout, max: 2 * minWatchTimeout},
		{name: "client-go's most", timeout: seconds(10 * time.Minute), min: minWatchTimeout, max: 2 * minWatchTimeout},
		{name: "longer already", timeout: seconds(90 * time.Minute), min: 90 * time.Minute, max: 90 * time.Minute},
		{name: "none: the API server's own"},
	}
	for _, tt := range tests {
		var asked *int64
		lw := Guard(&cache.ListWatch{WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			asked = o.TimeoutSeconds
			return watch.NewFake(), nil
		}}, nil, nil)
		w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{TimeoutSeconds: tt.timeout})
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
		if tt.timeout == nil {
			if asked != nil {
				t.Errorf("%s: the watch asked for %d s, want no timeout", tt.name, *asked)
			}
			continue
		}
		if got := time.Duration(*asked) * time.Second; got < tt.min || got > tt.max {
			t.Errorf("%s: the watch asked for %s, want %s to %s", tt.name, got, tt.min, tt.max)
		}
	}
}

// TestProbe asks a stand-in /readyz, which starts failing and then says
// ok, and shares one answer among waiters that ask at once.
func TestProbe(t *testing.T) {
	var asked atomic.Int32
	var ready atomic.Bool
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.URL.Path != "/readyz" || !ready.Load() {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer server.Close()
	p, err := NewProbeForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if p.Ready(ctx) || p.Ready(ctx) {
		t.Fatal("Ready while /readyz fails")
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("two Ready calls at once asked %d times, want 1 (and no retry of the 503)", n)
	}
	time.AfterFunc(300*time.Millisecond, func() { ready.Store(true) })
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after /readyz said ok: %v", err)
	}
}

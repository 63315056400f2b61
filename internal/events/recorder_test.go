package events

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
)

func cmRef(i int) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: fmt.Sprintf("cm-%d", i)}
}

// drops counts Options.Dropped calls by reason.
type drops struct {
	mu sync.Mutex
	by map[string]int
}

func (d *drops) add(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.by == nil {
		d.by = map[string]int{}
	}
	d.by[reason]++
}

func (d *drops) get() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.by)
}

// written lists the events the fake API server holds, oldest first.
func written(t *testing.T, client *fake.Clientset) []corev1.Event {
	t.Helper()
	list, err := client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// runUntil runs r until every recorded event is written or dropped, then
// stops it and waits for Run to return.
func runUntil(t *testing.T, r *Recorder, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.Run(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("events were not all written or dropped within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-stopped
}

// TestBurst is a cold start's events, more at once than client-go's
// broadcaster holds (1,000), one each on 1,500 objects. The e2e test
// TestEventsBurst sends 3,000 to a real API server.
func TestBurst(t *testing.T) {
	client := fake.NewClientset()
	var d drops
	r := NewRecorder(client.CoreV1(), scheme.Scheme, corev1.EventSource{Component: "helm-locker"}, Options{Dropped: d.add})
	const n = 1500
	for i := range n {
		r.Event(cmRef(i), corev1.EventTypeNormal, "Locked", "Locked revision 1")
	}
	var creates sync.Mutex
	created := 0
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates.Lock()
		defer creates.Unlock()
		created++
		return false, nil, nil
	})
	runUntil(t, r, func() bool { creates.Lock(); defer creates.Unlock(); return created == n })
	if got := len(written(t, client)); got != n {
		t.Errorf("%d events written, want %d", got, n)
	}
	if got := d.get(); len(got) != 0 {
		t.Errorf("dropped %v, want none", got)
	}
}

// TestDelivery covers what happens to events the API server refuses,
// cannot take, or already has, and to events past the queue's bound.
func TestDelivery(t *testing.T) {
	transport := errors.New("connection refused")
	tooBusy := apierrors.NewTooManyRequests("try later", 1)
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "x", nil)
	tests := []struct {
		name string
		// failures are the errors the first creates return, in turn.
		failures []error
		opts     Options
		record   func(r *Recorder)
		// want are the reasons of the events written, in order.
		want        []string
		wantCounts  []int32
		wantCreates int
		wantDropped map[string]int
	}{{
		name:        "repeats fold into one event",
		record:      func(r *Recorder) { repeat(r, 5, "Locked") },
		want:        []string{"Locked"},
		wantCounts:  []int32{5},
		wantCreates: 1,
	}, {
		name: "one object's events are written in order",
		record: func(r *Recorder) {
			for _, reason := range reasons(20) {
				r.Event(cmRef(0), corev1.EventTypeNormal, reason, "m")
			}
		},
		want:        reasons(20),
		wantCreates: 20,
	}, {
		name:        "refused for good: dropped, not sent again",
		failures:    []error{invalid},
		record:      func(r *Recorder) { repeat(r, 1, "Locked") },
		wantCreates: 1,
		wantDropped: map[string]int{DropRejected: 1},
	}, {
		name:        "unreachable: sent again",
		failures:    []error{transport, transport},
		record:      func(r *Recorder) { repeat(r, 1, "Locked") },
		want:        []string{"Locked"},
		wantCreates: 3,
	}, {
		name:        "too busy: sent again",
		failures:    []error{tooBusy},
		record:      func(r *Recorder) { repeat(r, 1, "Locked") },
		want:        []string{"Locked"},
		wantCreates: 2,
	}, {
		name:        "unreachable for every try: dropped",
		failures:    []error{transport, transport, transport},
		opts:        Options{Tries: 3},
		record:      func(r *Recorder) { repeat(r, 1, "Locked") },
		wantCreates: 3,
		wantDropped: map[string]int{DropUnreachable: 1},
	}, {
		name:        "past the queue's bound: dropped",
		opts:        Options{MaxQueued: 2},
		record:      func(r *Recorder) { distinct(r, 5) },
		want:        reasons(2),
		wantCreates: 2,
		wantDropped: map[string]int{DropQueueFull: 3},
	}, {
		name: "not Normal or Warning, or no reference: dropped",
		record: func(r *Recorder) {
			r.Event(cmRef(0), "Bogus", "Locked", "m")
			r.Event(nil, corev1.EventTypeNormal, "Locked", "m")
			r.Event(&unstructured.Unstructured{}, corev1.EventTypeNormal, "Locked", "m")
		},
		wantDropped: map[string]int{DropInvalid: 3},
	}, {
		name:        "past client-go's limit on one object: dropped",
		record:      func(r *Recorder) { distinct(r, 30) },
		want:        reasons(25),
		wantCreates: 25,
		wantDropped: map[string]int{DropRateLimited: 5},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			var mu sync.Mutex
			creates, failures := 0, tt.failures
			var reasons []string // of the events created, in turn
			client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				creates++
				if len(failures) > 0 {
					err := failures[0]
					failures = failures[1:]
					return true, nil, err
				}
				reasons = append(reasons, a.(k8stesting.CreateAction).GetObject().(*corev1.Event).Reason)
				return false, nil, nil
			})
			var d drops
			opts := tt.opts
			opts.RetryDelay, opts.Dropped = time.Millisecond, d.add
			r := NewRecorder(client.CoreV1(), scheme.Scheme, corev1.EventSource{Component: "helm-locker"}, opts)
			tt.record(r)
			settled := func() bool {
				mu.Lock()
				defer mu.Unlock()
				r.mu.Lock()
				defer r.mu.Unlock()
				return r.queued == 0 && creates >= tt.wantCreates
			}
			runUntil(t, r, settled)
			var counts []int32
			for _, e := range written(t, client) {
				counts = append(counts, e.Count)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.want, reasons); diff != "" {
				t.Errorf("events written (-want +got):\n%s", diff)
			}
			if tt.wantCounts != nil {
				if diff := cmp.Diff(tt.wantCounts, counts); diff != "" {
					t.Errorf("their counts (-want +got):\n%s", diff)
				}
			}
			if creates != tt.wantCreates {
				t.Errorf("%d creates sent, want %d", creates, tt.wantCreates)
			}
			if diff := cmp.Diff(tt.wantDropped, d.get(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
		})
	}
}

// repeat records the same event n times on one object.
func repeat(r *Recorder, n int, reason string) {
	for range n {
		r.Event(cmRef(0), corev1.EventTypeNormal, reason, "Locked revision 1")
	}
}

// distinct records n events of different reasons on one object: the
// correlator folds none of them, and lets 25 through.
func distinct(r *Recorder, n int) {
	for _, reason := range reasons(n) {
		r.Event(cmRef(0), corev1.EventTypeWarning, reason, "m")
	}
}

// reasons are n event reasons, R00 on.
func reasons(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("R%02d", i))
	}
	return out
}

// TestShutdown: what is queued when Run's context ends is written while
// Options.Drain lasts, and the rest, and what is recorded after Run
// returned, is dropped and counted.
func TestShutdown(t *testing.T) {
	tests := []struct {
		name        string
		delay       time.Duration // of each create
		drain       time.Duration
		wantWritten func(n int) bool
	}{
		{"drained", 0, time.Minute, func(n int) bool { return n == 10 }},
		{"past the drain", 20 * time.Millisecond, 50 * time.Millisecond, func(n int) bool { return n > 0 && n < 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
				time.Sleep(tt.delay)
				return false, nil, nil
			})
			var d drops
			r := NewRecorder(client.CoreV1(), scheme.Scheme, corev1.EventSource{Component: "helm-locker"}, Options{Writers: 1, Drain: tt.drain, Dropped: d.add})
			for i := range 10 {
				r.Event(cmRef(i), corev1.EventTypeNormal, "Locked", "m")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r.Run(ctx)
			n := len(written(t, client))
			if !tt.wantWritten(n) {
				t.Errorf("%d of 10 events written", n)
			}
			r.Event(cmRef(99), corev1.EventTypeNormal, "Locked", "m")
			if diff := cmp.Diff(map[string]int{DropShutdown: 10 - n + 1}, d.get()); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
		})
	}
}

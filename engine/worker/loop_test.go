package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// outcome is what one sync of a key does.
type outcome int

const (
	succeed outcome = iota
	fail
	panics
	requeue // succeeds, asking to be synced again in a millisecond
)

// TestRun queues keys, each with the outcomes of its syncs in turn, to one
// worker, so that a panic the loop did not recover would stop every key
// after it. Each key must be synced once per outcome, a failure or a panic
// retried and a requeue honoured, and forgotten by the rate limiter in the
// end.
func TestRun(t *testing.T) {
	tests := []struct {
		key      string
		outcomes []outcome
	}{
		{key: "succeeds", outcomes: []outcome{succeed}},
		{key: "fails twice", outcomes: []outcome{fail, fail, succeed}},
		{key: "panics", outcomes: []outcome{panics, succeed}},
		{key: "panics again", outcomes: []outcome{panics, panics, fail, succeed}},
		{key: "requeues", outcomes: []outcome{requeue, requeue, succeed}},
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	var mu sync.Mutex
	calls := map[string]int{}
	done := map[string]chan struct{}{}
	script := map[string][]outcome{}
	for _, tt := range tests {
		done[tt.key] = make(chan struct{})
		script[tt.key] = tt.outcomes
		queue.Add(tt.key)
	}
	syncKey := func(ctx context.Context, key string) (time.Duration, error) {
		mu.Lock()
		n := calls[key]
		calls[key]++
		mu.Unlock()
		if n >= len(script[key]) {
			t.Errorf("%s synced %d times; want %d", key, n+1, len(script[key]))
			return 0, nil
		}
		if n == len(script[key])-1 {
			defer close(done[key])
		}
		switch script[key][n] {
		case fail:
			return 0, errors.New("failed")
		case panics:
			panic("boom")
		case requeue:
			return time.Millisecond, nil
		}
		return 0, nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		Run(ctx, queue, 1, syncKey)
		close(stopped)
	}()
	for _, tt := range tests {
		select {
		case <-done[tt.key]:
		case <-time.After(10 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: not synced through its outcomes (%d syncs of %d)", tt.key, calls[tt.key], len(tt.outcomes))
		}
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its context was done")
	}
	if !queue.ShuttingDown() {
		t.Error("Run returned without shutting the queue down")
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := calls[tt.key]; got != len(tt.outcomes) {
				t.Errorf("synced %d times; want %d", got, len(tt.outcomes))
			}
			if n := queue.NumRequeues(tt.key); n != 0 {
				t.Errorf("NumRequeues = %d after the last sync succeeded; want 0 (forgotten)", n)
			}
		})
	}
}

// TestRecover: a panic becomes a *PanicError naming the key; an error
// passes through.
func TestRecover(t *testing.T) {
	tests := []struct {
		name    string
		f       func() error
		wantErr string
		panics  bool
	}{
		{name: "success", f: func() error { return nil }},
		{name: "error", f: func() error { return errors.New("failed") }, wantErr: "failed"},
		{name: "panic", f: func() error { panic("boom") }, wantErr: "panic while syncing HelmRelease ns/hr: boom", panics: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Recover("HelmRelease ns/hr", tt.f)
			if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("err = %v; want %q", err, tt.wantErr)
			}
			var p *PanicError
			if errors.As(err, &p) != tt.panics {
				t.Fatalf("err = %#v; a *PanicError: %v", err, tt.panics)
			}
			if tt.panics && (p.Value != "boom" || !strings.Contains(string(p.Stack), "TestRecover")) {
				t.Errorf("PanicError = %v, stack:\n%s\nwant the value and the panicking stack", p.Value, p.Stack)
			}
		})
	}
}

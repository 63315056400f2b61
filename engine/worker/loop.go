package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Sync syncs one key. It returns how soon to sync the key again, zero for
// not until it is queued, or an error to retry the key on, with the
// queue's backoff; requeueAfter is ignored with an error.
type Sync[K comparable] func(ctx context.Context, key K) (requeueAfter time.Duration, err error)

// Run syncs the keys of queue with workers goroutines until ctx is done,
// then shuts queue down and waits for the workers to finish the syncs they
// are in. A key is synced by one worker at a time (the queue sees to it).
// One that syncs without error is forgotten by the rate limiter, and
// queued again after the delay it asks for; one whose sync fails, or
// panics (see Recover), is queued again with the rate limiter's backoff,
// and the other keys go on.
func Run[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], workers int, syncKey Sync[K]) {
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		queue.ShutDown()
	})
	for range workers {
		wg.Go(func() {
			for next(ctx, queue, syncKey) {
			}
		})
	}
	wg.Wait()
}

// next syncs one key of queue, and reports false once queue is shut down.
func next[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], syncKey Sync[K]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	var requeueAfter time.Duration
	err := Recover(key, func() (err error) {
		requeueAfter, err = syncKey(ctx, key)
		return err
	})
	if err != nil {
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	if requeueAfter > 0 {
		queue.AddAfter(key, requeueAfter)
	}
	return true
}

// PanicError is a panic in the sync of Key, recovered, so that one bad key
// cannot take the process, and every other key, down with it.
type PanicError struct {
	// Key is what was being synced, as Recover was given it.
	Key any
	// Value is what the sync panicked with.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic while syncing %v: %v", e.Key, e.Value)
}

// Recover calls f, which syncs key, and returns its error, or a panic in
// it as a *PanicError. Run recovers every sync this way; a Sync calls it
// itself where it must see the panic as an error before Run does: to log
// it, or to hand it to whoever waits on the key.
func Recover(key any, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Key: key, Value: r, Stack: debug.Stack()}
		}
	}()
	return f()
}

package informers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// An informer keeps no object that was untracked at its last event, so a
// caller that begins tracking objects after the informer listed them
// finds them missing from the cache. A few such objects are best read with
// a Scan of their namespace; many, declared at once in many namespaces
// (every release of a cluster locked in one burst), cost a scan each,
// mostly of the same untracked objects again, where one list of the whole
// type would have served them all. Relist chooses between the two by what
// the type's scans have read since its last list.

// scanCost is the least a Scan counts for, in objects read (see Relist):
// a request costs the API server more than the objects it sends, and a
// scan that finds its objects in the first few of a namespace is a
// request all the same. A page of a list is 500 objects. Counted by the
// objects alone, a burst of 500 releases ran 300 scans of ConfigMaps
// before their first relist, each of about 100 objects.
const scanCost = 500

// relistGather is the least a relist waits, from the first Relist that
// asks for it, for more callers to join before it begins: callers that
// come in a burst share one list.
const relistGather = 200 * time.Millisecond

// Relist lists gvr's objects again into its informer's cache, for a caller
// that began tracking objects after the informer's last list began and
// finds them missing (see Options.Tracked), or returns nil when a Scan of
// their namespace costs less: while the type's scans since its relists
// last ended have read fewer objects than its last list did (each counted
// as at least scanCost). Once a relist is asked for, every Relist joins
// the next while they keep coming (the relists of a burst follow one
// another), and the scans count anew only once a relist ends with none
// asked for. A nil return also means the informer is not running.
//
// The channel returned is closed once a list that began after the call
// has been stored, the events of the objects it found the cache without
// handled, or once the informer stops. The informer's cache stays synced
// meanwhile, and what changes during the list reaches the Handler when it
// is stored: later than a watch would tell, never lost.
func (r *Registry) Relist(gvr schema.GroupVersionResource) <-chan struct{} {
	return r.relistIf(gvr, func(e *entry) bool { return e.relisting || e.scanned >= e.store.listed() })
}

// Refresh is Relist without the choice: it relists gvr whatever its scans
// have read, for a caller that began tracking many of its objects at once
// and knows a list serves them better than scans (see
// engine.Engine.Relist). It returns nil only when the informer is not
// running or has not listed yet: its first list, under way, finds what is
// tracked now.
func (r *Registry) Refresh(gvr schema.GroupVersionResource) <-chan struct{} {
	return r.relistIf(gvr, func(*entry) bool { return true })
}

// relistIf joins gvr's next relist, asking for one if none is due and
// worth says so.
func (r *Registry) relistIf(gvr schema.GroupVersionResource, worth func(*entry) bool) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[gvr]
	if e == nil || e.cancel == nil || r.ctx == nil || !e.store.HasSynced() {
		return nil
	}
	if e.wave == nil {
		if !worth(e) {
			return nil
		}
		e.wave = make(chan struct{})
		if !e.relisting {
			e.relisting = true
			r.wg.Add(1)
			go r.relist(r.ctx, e)
		}
	}
	return e.wave
}

// relist runs e's relists, one at a time, while Relist asks for them: a
// new reflector of the type, after the one running has stopped, into the
// same store, whose Replace reports what changed and what the cache did
// not hold.
func (r *Registry) relist(ctx context.Context, e *entry) {
	defer r.wg.Done()
	// Each relist waits at least as long as the last took: in a burst,
	// the type's relists keep the API server listing it half the time at
	// most, however many callers keep asking.
	gather := relistGather
	for {
		select {
		case <-ctx.Done():
		case <-time.After(gather):
		}
		r.mu.Lock()
		wave := e.wave
		e.wave = nil
		if wave == nil || ctx.Err() != nil || e.cancel == nil {
			// The burst is over: scans count anew from here.
			e.relisting, e.scanned = false, 0
			r.mu.Unlock()
			if wave != nil {
				close(wave)
			}
			return
		}
		e.cancel()
		began := time.Now()
		stored := r.runLocked(e, e.done)
		stopped := e.done
		r.mu.Unlock()
		select {
		case <-stored:
		case <-stopped:
		}
		close(wave)
		gather = max(relistGather, time.Since(began))
	}
}

// scannedObjects adds what a Scan of gvr read to the type's count.
func (r *Registry) scannedObjects(gvr schema.GroupVersionResource, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[gvr]; e != nil {
		e.scanned += n
	}
}

// Hold keeps informers from starting until release is called: those of
// types Acquired meanwhile, and those a CRD's return would start again. It
// is for a caller about to begin tracking many objects at once, in types
// whose informers may not run yet: started by the first Acquire, an
// informer's first list would drop the objects of the callers that
// follow it while it lists, and have to list again for them; held, its
// first list finds them all tracked. A type held is not synced (see Get),
// as before Run. Informers already running are not affected. Calls of
// release after the first do nothing.
func (r *Registry) Hold() (release func()) {
	r.mu.Lock()
	r.holds++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.holds--; r.holds > 0 || r.ctx == nil {
				return
			}
			for _, e := range r.entries {
				r.startLocked(e)
			}
		})
	}
}

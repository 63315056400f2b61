package leader

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

var leasesResource = coordinationv1.SchemeGroupVersion.WithResource("leases")

// fakeAPI is a fake clientset whose Leases behave as the API server's do
// in what the elector relies on, which the plain fake does not do: every
// write gets a new resourceVersion, an Update with a stale one is a
// conflict, and a watch sees every later write. Writes the test makes as
// another replica (put, remove) go straight to the tracker, so that
// Actions lists only the elector's requests.
type fakeAPI struct {
	*fake.Clientset
	mu sync.Mutex
	rv int
	// watchers are the watches the elector opened, so a test can end
	// one as the API server would.
	watchers []*watch.RaceFreeFakeWatcher
	// stalled makes new watches deliver nothing, as a watch lagging far
	// behind would.
	stalled bool
	// down makes every request fail as with the API server stopped, and
	// Ready say no.
	down atomic.Bool
}

// errRefused is what a request to a stopped API server gets.
var errRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

// Ready is the fake API server's readiness (see Readiness).
func (f *fakeAPI) Ready(context.Context) bool { return !f.down.Load() }

func newFakeAPI(t *testing.T, initial *coordinationv1.Lease) *fakeAPI {
	t.Helper()
	f := &fakeAPI{Clientset: fake.NewClientset()}
	tracker := f.Tracker()
	f.PrependReactor("create", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		lease := action.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		if lease.ResourceVersion != "" {
			return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
		}
		return true, lease, f.storeLocked(lease, true)
	})
	f.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		lease := action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		current, err := tracker.Get(leasesResource, lease.Namespace, lease.Name)
		if err != nil {
			return true, nil, err
		}
		if current.(*coordinationv1.Lease).ResourceVersion != lease.ResourceVersion {
			return true, nil, apierrors.NewConflict(leasesResource.GroupResource(), lease.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		return true, lease, f.storeLocked(lease, false)
	})
	f.PrependWatchReactor("leases", func(action clienttesting.Action) (bool, watch.Interface, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.stalled {
			w := watch.NewRaceFreeFake()
			f.watchers = append(f.watchers, w)
			return true, w, nil
		}
		w, err := tracker.Watch(leasesResource, action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		f.watchers = append(f.watchers, w.(*watch.RaceFreeFakeWatcher))
		return true, w, nil
	})
	f.PrependReactor("*", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if f.down.Load() {
			return true, nil, errRefused
		}
		return false, nil, nil
	})
	f.PrependWatchReactor("leases", func(clienttesting.Action) (bool, watch.Interface, error) {
		if f.down.Load() {
			return true, nil, errRefused
		}
		return false, nil, nil
	})
	if initial != nil {
		f.put(t, initial)
	}
	return f
}

// storeLocked gives lease the next resourceVersion and stores it.
func (f *fakeAPI) storeLocked(lease *coordinationv1.Lease, create bool) error {
	f.rv++
	lease.ResourceVersion = strconv.Itoa(f.rv)
	if create {
		return f.Tracker().Create(leasesResource, lease, lease.Namespace)
	}
	return f.Tracker().Update(leasesResource, lease, lease.Namespace)
}

// put writes lease as another replica would, whatever its
// resourceVersion.
func (f *fakeAPI) put(t *testing.T, lease *coordinationv1.Lease) {
	t.Helper()
	lease = lease.DeepCopy()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.Tracker().Get(leasesResource, lease.Namespace, lease.Name)
	if err := f.storeLocked(lease, err != nil); err != nil {
		t.Fatal(err)
	}
}

// remove deletes the Lease, as an administrator might.
func (f *fakeAPI) remove(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.Tracker().Delete(leasesResource, "ns", "locker"); err != nil {
		t.Fatal(err)
	}
}

// lease reads the stored Lease; nil if there is none.
func (f *fakeAPI) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	obj, err := f.Tracker().Get(leasesResource, "ns", "locker")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*coordinationv1.Lease)
}

// stall makes watches opened from now on deliver nothing.
func (f *fakeAPI) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = true
}

// closeWatches ends the open watches, as the API server does when a
// watch times out.
func (f *fakeAPI) closeWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watchers {
		w.Stop()
	}
	f.watchers = nil
}

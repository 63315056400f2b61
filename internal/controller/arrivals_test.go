package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestArrivalsDue: a gathering is taken once no lock has come for
// arrivalQuiet, or arrivalGather after its first, whichever is sooner, so
// that a burst that keeps coming is still declared in steps.
func TestArrivalsDue(t *testing.T) {
	first := time.Unix(1000, 0)
	tests := []struct {
		name  string
		comes []time.Duration // after first, each lock's arrival
		now   time.Duration
		want  time.Duration
	}{
		{name: "one lock, just come", comes: []time.Duration{0}, now: 0, want: arrivalQuiet},
		{name: "one lock, quiet since", comes: []time.Duration{0}, now: arrivalQuiet, want: 0},
		{name: "another came", comes: []time.Duration{0, 80 * time.Millisecond}, now: arrivalQuiet, want: 80 * time.Millisecond},
		{name: "a burst that keeps coming", comes: []time.Duration{0, arrivalGather / 2, arrivalGather - 50*time.Millisecond}, now: arrivalGather - 10*time.Millisecond, want: 10 * time.Millisecond},
		{name: "past the gathering", comes: []time.Duration{0, arrivalGather - 10*time.Millisecond}, now: arrivalGather + 100*time.Millisecond, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newArrivals()
			for i, at := range tt.comes {
				a.add(lockKey{ObjectName: cache.ObjectName{Namespace: "ns", Name: string(rune('a' + i))}}, first.Add(at))
			}
			if got := a.due(first, first.Add(tt.now)); got != tt.want {
				t.Errorf("due = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestArrivalsHold: a lock handed over is held, once however often it is
// handed over, until the batch it was taken in is done; what comes after a
// take waits for the next.
func TestArrivalsHold(t *testing.T) {
	a := newArrivals()
	k1 := lockKey{ObjectName: cache.ObjectName{Namespace: "ns", Name: "one"}}
	k2 := lockKey{ObjectName: cache.ObjectName{Namespace: "ns", Name: "two"}}
	now := time.Now()
	a.add(k1, now)
	a.add(k1, now)
	select {
	case <-a.wake:
	default:
		t.Fatal("adding a lock did not wake the gatherer")
	}
	batch := a.take()
	if len(batch) != 1 || batch[0] != k1 {
		t.Fatalf("take = %v, want [%v] once", batch, k1)
	}
	a.add(k2, now)
	if !a.holds(k1) || !a.holds(k2) {
		t.Error("a lock taken, or come after the take, is not held")
	}
	a.done(batch)
	if a.holds(k1) {
		t.Error("a lock is held after its batch is done")
	}
	if next := a.take(); len(next) != 1 || next[0] != k2 {
		t.Errorf("the next take = %v, want [%v]", next, k2)
	}
}

// TestAdmitJoinsLateArrivals: locks that arrive while a gathering is
// declared join it, and are declared before its list of their types,
// rather than wait for a gathering of their own; once the gathering has
// been declared for arrivalJoin, they wait for the next.
func TestAdmitJoinsLateArrivals(t *testing.T) {
	first := helmReleaseKey("cattle-helm-system", "hr")
	late := helmReleaseKey("cattle-helm-system", "late")
	tests := []struct {
		name     string
		join     time.Duration
		want     []lockKey
		leftOver []lockKey
	}{
		{name: "while declared", join: arrivalJoin, want: []lockKey{first, late}},
		{name: "past arrivalJoin", join: 0, want: []lockKey{first}, leftOver: []lockKey{late}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
			kube := c.cfg.Kube.(*fake.Clientset)
			kube.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
				c.arrivals.add(late, time.Now())
				return false, nil, nil
			})
			c.synced.Store(true)
			c.arrivals.join = tt.join
			c.arrivals.add(first, time.Now())
			if got := c.admit(context.Background(), c.arrivals.take()); !slices.Equal(got, tt.want) {
				t.Errorf("admit declared %v, want %v", got, tt.want)
			}
			if rest := c.arrivals.take(); !slices.Equal(rest, tt.leftOver) {
				t.Errorf("%v wait for the next gathering after admit, want %v", rest, tt.leftOver)
			}
			if st := c.state(first); st.rel == nil || st.rel.Version != 1 {
				t.Errorf("the first lock is not declared: %+v", st.rel)
			}
		})
	}
}

package leader

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 11, 22, 7, 40, 0, 0, time.UTC)

func leaseHeldBy(holder string, renewTime time.Time, seconds int32) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewTime)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "locker", Namespace: "ns", ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &seconds,
			AcquireTime:          &rt,
			RenewTime:            &rt,
			LeaseTransitions:     ptr(int32(3)),
		},
	}
}

func TestObservationFreeAt(t *testing.T) {
	const fallback = 20 * time.Second
	noDuration := leaseHeldBy("other", t0, 0)
	noDuration.Spec.LeaseDurationSeconds = nil
	for _, tc := range []struct {
		name string
		// seen are Leases seen one after the other, each a second
		// after the one before, starting at t0.
		seen []*coordinationv1.Lease
		want time.Time
	}{
		{"none exists: take it now", []*coordinationv1.Lease{nil}, time.Time{}},
		{"released: take it now", []*coordinationv1.Lease{leaseHeldBy("", t0, 1)}, time.Time{}},
		{"held by this replica: take it now", []*coordinationv1.Lease{leaseHeldBy("me", t0, 12)}, time.Time{}},
		{"held: the holder's duration after it was seen", []*coordinationv1.Lease{leaseHeldBy("other", t0, 12)}, t0.Add(12 * time.Second)},
		{
			"renewTime from a clock an hour behind does not make it expired",
			[]*coordinationv1.Lease{leaseHeldBy("other", t0.Add(-time.Hour), 12)}, t0.Add(12 * time.Second),
		},
		{
			"renewTime from a clock an hour ahead does not make it last longer",
			[]*coordinationv1.Lease{leaseHeldBy("other", t0.Add(time.Hour), 12)}, t0.Add(12 * time.Second),
		},
		{
			"renewed: counts from when the renewal was seen",
			[]*coordinationv1.Lease{leaseHeldBy("other", t0, 12), leaseHeldBy("other", t0.Add(10*time.Second), 12)}, t0.Add(13 * time.Second),
		},
		{
			"seen again unchanged: counts from the first sight",
			[]*coordinationv1.Lease{leaseHeldBy("other", t0, 12), leaseHeldBy("other", t0, 12)}, t0.Add(12 * time.Second),
		},
		{"no duration in the Lease: the fallback", []*coordinationv1.Lease{noDuration}, t0.Add(fallback)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o observation
			for i, lease := range tc.seen {
				o.see(lease, t0.Add(time.Duration(i)*time.Second))
			}
			if got := o.freeAt("me", fallback); !got.Equal(tc.want) {
				t.Errorf("freeAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObservationSeeReportsHolderChanges(t *testing.T) {
	var o observation
	steps := []struct {
		lease *coordinationv1.Lease
		want  bool
	}{
		{leaseHeldBy("a", t0, 12), true},
		{leaseHeldBy("a", t0.Add(time.Second), 12), false},
		{leaseHeldBy("b", t0, 12), true},
		{nil, true},
		{nil, false},
	}
	for i, s := range steps {
		if got := o.see(s.lease, t0); got != s.want {
			t.Errorf("step %d: see reported a holder change %v, want %v", i, got, s.want)
		}
	}
}

func TestLeaseSecondsRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int32{
		12 * time.Second:         12,
		12500 * time.Millisecond: 13,
		time.Millisecond:         1,
	} {
		if got := leaseSeconds(d); got != want {
			t.Errorf("leaseSeconds(%s) = %d, want %d", d, got, want)
		}
	}
}

func TestRecords(t *testing.T) {
	now := metav1.NewMicroTime(t0.Add(time.Minute))
	meta := metav1.ObjectMeta{Name: "locker", Namespace: "ns"}
	spec := func(holder string, seconds, transitions int32, acquired, renewed metav1.MicroTime) coordinationv1.LeaseSpec {
		return coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &acquired, RenewTime: &renewed, LeaseTransitions: &transitions}
	}
	before := metav1.NewMicroTime(t0)
	for _, tc := range []struct {
		name string
		got  *coordinationv1.Lease
		want coordinationv1.LeaseSpec
	}{
		{"acquiring a new Lease: no transition yet", acquired(nil, meta, "me", 12*time.Second, now.Time), spec("me", 12, 0, now, now)},
		{"acquiring from another holder: one more transition", acquired(leaseHeldBy("other", t0, 15), meta, "me", 12*time.Second, now.Time), spec("me", 12, 4, now, now)},
		{"acquiring a released Lease: one more transition", acquired(leaseHeldBy("", t0, 1), meta, "me", 12*time.Second, now.Time), spec("me", 12, 4, now, now)},
		{"acquiring one's own Lease again: no transition", acquired(leaseHeldBy("me", t0, 12), meta, "me", 12*time.Second, now.Time), spec("me", 12, 3, now, now)},
		{"renewing moves only renewTime", renewed(leaseHeldBy("me", t0, 12), 12*time.Second, now.Time), spec("me", 12, 3, before, now)},
		{"releasing empties the holder, for a second", released(leaseHeldBy("me", t0, 12), now.Time), spec("", 1, 3, now, now)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if tc.got.Name != "locker" || tc.got.Namespace != "ns" {
				t.Errorf("Lease %s/%s, want ns/locker", tc.got.Namespace, tc.got.Name)
			}
		})
	}
}

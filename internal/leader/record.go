package leader

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// observation is what a standby knows of the Lease.
type observation struct {
	// known is false until the Lease has been read, and again after a
	// watch error, until it is read afresh.
	known bool
	// lease is the last Lease seen; nil when there is none.
	lease *coordinationv1.Lease
	// changedAt is when, by this replica's clock, the Lease's spec was
	// first seen as it is now. Expiry counts from here.
	changedAt time.Time
}

// see records lease (nil: it does not exist) as seen at now. changedAt
// moves only when the spec differs from the one seen before: a Lease read
// again unchanged, or changed only in its metadata, does not restart the
// countdown. It reports whether the holder changed.
func (o *observation) see(lease *coordinationv1.Lease, now time.Time) (holderChanged bool) {
	holderChanged = !o.known || holderOf(o.lease) != holderOf(lease)
	if !o.known || (o.lease == nil) != (lease == nil) || (lease != nil && !equality.Semantic.DeepEqual(o.lease.Spec, lease.Spec)) {
		o.changedAt = now
	}
	o.known, o.lease = true, lease
	return holderChanged
}

// freeAt is when this replica, named identity, may try to take the Lease:
// at once (the zero time) if there is none, nobody holds it, or it holds it
// itself; otherwise once the holder's lease duration has passed since the
// spec last changed. A Lease that names no duration is given fallback.
func (o *observation) freeAt(identity string, fallback time.Duration) time.Time {
	holder := holderOf(o.lease)
	if holder == "" || holder == identity {
		return time.Time{}
	}
	d := fallback
	if s := o.lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		d = time.Duration(*s) * time.Second
	}
	return o.changedAt.Add(d)
}

// holderOf is the Lease's holder; "" when there is no Lease or it is free.
func holderOf(lease *coordinationv1.Lease) string {
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// leaseSeconds is d in whole seconds, rounded up, as Lease specs hold it:
// a standby must never see a shorter lease than the leader counts on.
func leaseSeconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// acquired is the Lease that makes identity its holder: prev updated, or a
// new Lease named meta when prev is nil. A change of holder counts a
// transition, as client-go does.
func acquired(prev *coordinationv1.Lease, meta metav1.ObjectMeta, identity string, duration time.Duration, now time.Time) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{ObjectMeta: *meta.DeepCopy()}
	transitions := int32(0)
	if prev != nil {
		lease = prev.DeepCopy()
		if prev.Spec.LeaseTransitions != nil {
			transitions = *prev.Spec.LeaseTransitions
		}
		if holder := holderOf(prev); holder != identity {
			transitions++
		}
	}
	t := metav1.NewMicroTime(now)
	lease.Spec.HolderIdentity = &identity
	lease.Spec.LeaseDurationSeconds = ptr(leaseSeconds(duration))
	lease.Spec.AcquireTime = &t
	lease.Spec.RenewTime = ptr(t)
	lease.Spec.LeaseTransitions = &transitions
	return lease
}

// renewed is held with its renewTime moved to now.
func renewed(held *coordinationv1.Lease, duration time.Duration, now time.Time) *coordinationv1.Lease {
	lease := held.DeepCopy()
	t := metav1.NewMicroTime(now)
	lease.Spec.RenewTime = &t
	lease.Spec.LeaseDurationSeconds = ptr(leaseSeconds(duration))
	return lease
}

// released is held given up: no holder. Its duration is 1 s, as client-go's
// ReleaseOnCancel writes it, so that standbys running client-go's elector,
// which do not treat an empty holder as free, wait only a second.
func released(held *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	lease := held.DeepCopy()
	t := metav1.NewMicroTime(now)
	lease.Spec.HolderIdentity = ptr("")
	lease.Spec.LeaseDurationSeconds = ptr(int32(1))
	lease.Spec.AcquireTime = &t
	lease.Spec.RenewTime = ptr(t)
	return lease
}

func ptr[T any](v T) *T { return &v }

// Package leader elects one leader among helm-locker's replicas through a
// coordination.k8s.io Lease, so that only one of them writes.
//
// It exists because client-go's leaderelection cannot meet both of
// helm-locker's targets at once: a crashed leader replaced within 15 s, and
// no more than 6 requests a minute when nothing changes. client-go's
// standbys poll the Lease every RetryPeriod, and it requires LeaseDuration >
// RenewDeadline > 1.2 × RetryPeriod; a leader renewing every 10 s (6
// requests a minute) then needs a lease over 12 s, and a polling standby
// notices its expiry up to one more period later, past 15 s.
//
// Here:
//   - the leader renews every RetryPeriod with one optimistic Update of the
//     Lease (guarded by its resourceVersion), its only request at idle;
//     while its work sends requests, it renews from half the period on,
//     so that a renewal slowed by that load has more than the second
//     between the period and the renew deadline to get through;
//   - standbys watch the single Lease (field selector metadata.name) instead
//     of polling it, and try to take it the moment it expires, or at once
//     when the leader releases it (an empty holderIdentity);
//   - a standby measures expiry from when it saw the Lease's record last
//     change, by its own clock, never from the renewTime another machine
//     wrote, as client-go does with its observedTime: clocks may be skewed,
//     elapsed time on one clock is not;
//   - the leader stops leading when it has not renewed within RenewDeadline
//     of its last successful renewal (measured from when it sent that
//     request), which is shorter than LeaseDuration, so it stops before any
//     standby can take the Lease, and two leaders never write at once;
//   - on a graceful stop the leader waits for its work to end, then releases
//     the Lease, and a standby takes it as soon as its watch delivers that.
//
// Every write is guarded by the Lease's resourceVersion: a standby whose
// view is stale fails to take a Lease that was just renewed, and learns
// of the renewal from the conflict. Clocks decide only when to try.
//
// A crashed leader is replaced after at most LeaseDuration minus the time
// since its last renewal, plus the successor's startup.
package leader

// Package lock is the state machine of one lock: unlocked, reconciling,
// locked, or watching for a lock that only reports. It is pure: what a
// declaration's owner is doing (Helm's release status, for one) is the
// caller's to turn into its events.
package lock

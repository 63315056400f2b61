// Package throttle bounds how often something may happen for each key: at
// most once per interval, the interval doubling while it is asked for
// again soon after, and at most a number of times an hour. Two-way
// locking's Upgrade mode passes each release's upgrades through one, so
// that a lookup target flipped back and forth does not upgrade the
// release, and open its lock, at every flip. It never logs, and takes its
// clock from the caller, so that its tests need no sleeps.
package throttle

// Package registry is a map that goroutines share: what a controller
// remembers by key between syncs, written by the worker syncing a key and
// read or dropped by event handlers and webhooks. It is a package of its
// own, not a file of the controller, so that the controller's several such
// memories are one type, tested once and apart from the syncs that use it,
// rather than a mutex and a map written out for each.
package registry

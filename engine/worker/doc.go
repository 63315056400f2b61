// Package worker is the loop that drains a typed rate-limited workqueue:
// Get, sync, Done, then Forget, AddAfter or AddRateLimited, with a panic in
// a sync turned into that key's error. The controller's queue of locks and
// the engine's Locker's queue of sets run the same loop; each keeps what is
// its own (logging, metrics, telling a set's waiters) in the Sync it
// passes. It lives under engine, which imports nothing of the module's
// internal packages, and never logs, as a library must not.
package worker

// Package engine keeps sets of unstructured objects exactly as declared: it
// computes three-way merge patches against the live objects by the API
// server's own list, map and union rules, recreates deleted ones and skips
// patches that would change nothing. It knows nothing of Helm.
//
// Locker is the way in for an operator that locks its own objects: it
// brings the informers, the workqueue and the RESTMapper along. Build one
// with NewLocker from a rest.Config (as clientcmd returns it), start Run in
// a goroutine, parse a manifest with the manifest package, and call Lock
// with the objects; Set.WaitLocked waits until they are as declared, and
// OnDrift reports what others change. docs/library.md and
// examples/lock-manifest show the whole program. Engine is the
// part beneath Locker, for a controller that runs its own queue and
// reports each Sync itself.
package engine

// Package engine keeps sets of unstructured objects exactly as declared: it
// computes three-way merge patches against the live objects by the API
// server's own list, map and union rules, recreates deleted ones and skips
// patches that would change nothing. It knows nothing of Helm.
//
// Locker is the way in for an operator that locks its own objects: it
// brings the informers, the workqueue and the RESTMapper along (see the
// package example). Engine is the part beneath it, for a controller that
// runs its own queue and reports each Sync itself.
package engine

// Package controller is the controller of both kinds of lock, on one queue
// and one engine. They differ only in where a declaration comes from: a
// HelmRelease's from Helm's storage (package storage), held while the
// release is deployed and as far as Helm is seen to apply it; a
// ManifestLock's from its manifest, applied where missing and pruned from
// its inventory. Each sync goes observe → decide → act → report and
// returns what it asks of the queue; the loop owns the queue. Each lock's
// state machine is package lock.
package controller

// Package upgrade upgrades a Helm release with its own stored chart and
// values, through the SDK of the Helm that wrote its latest revision (Helm
// 3's or Helm 4's, which render some charts differently), as the release's
// write identity: what `helm upgrade --reuse-values` with the same chart
// does, for when the cluster moved under a release (a `lookup` target
// changed, the Kubernetes version changed) and its manifest would now
// render differently.
//
// It does nothing else: deciding that a release needs an upgrade, and
// reporting the outcome, are the caller's. It never logs.
package upgrade

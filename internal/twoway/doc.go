// Package twoway is two-way locking: it renders a locked release's
// verified chart again against the cluster as it is now, and says whether
// it renders as its revision stores it. Its triggers are the objects a
// chart looked up, the APIs the cluster serves and its Kubernetes
// version; its renders have a queue and workers of their own, so that a
// render never waits in front of a revert. In Upgrade mode it upgrades
// the release to the new render, throttled, and remembers the upgrade
// Helm failed.
//
// The controller tells it facts (Trust, Forget, ClusterMoved,
// RememberFailedUpgrade) and asks it small questions (the Report a lock
// writes, FailedByUpgrade); it reads the controller only through Locks,
// and the engine's watches through Watches.
package twoway

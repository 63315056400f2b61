// Package v1alpha1 is the ManifestLock API, group helm-locker.io: a lock
// of the objects of a raw manifest.
package v1alpha1

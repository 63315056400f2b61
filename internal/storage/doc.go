// Package storage reads Helm's release storage: the release Secrets Helm's
// Secret driver writes, each one revision of one release. It is the one
// place that knows their format; the engine and the manifest parser know
// nothing of Helm.
package storage

// Package v1alpha1 is the ManifestLock API, group helm-locker.io: a lock
// of the objects of a raw manifest.
//
// +groupName=helm-locker.io
package v1alpha1

// The +groupName marker, and the +kubebuilder markers of the types, are
// read by crd-ref-docs to write docs/api-reference.md (make api-reference).
// A +kubebuilder:default is what the locker takes an empty field for: the
// CRD sets no schema defaults, so the API server stores a field as written.
// The CRD, api/helm-locker.io_manifestlocks.yaml, is written by hand.

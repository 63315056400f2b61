// Package v1alpha1 holds the HelmRelease types, group helm.cattle.io. The
// spec is the one rancher/helm-locker defines, so existing CRs keep working.
//
// +groupName=helm.cattle.io
package v1alpha1

// The +groupName marker, and the +kubebuilder markers of the types, are
// read by crd-ref-docs to write docs/api-reference.md (make api-reference).
// A +kubebuilder:default is what the locker takes an empty field for: the
// CRD sets no schema defaults, so the API server stores a field as written.
// The CRD, api/helm.cattle.io_helmreleases.yaml, is written by hand.

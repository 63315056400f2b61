// Package api installs the HelmRelease CustomResourceDefinition. The types
// live in api/v1alpha1; the CRD is embedded here so the operator can create
// or update it at startup, and deploy/chart/helm-locker/crds ships the same bytes for those
// who install it by hand.
package api

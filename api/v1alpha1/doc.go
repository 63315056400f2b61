// Package v1alpha1 holds the HelmRelease types, group helm.cattle.io. The
// spec is the one rancher/helm-locker defines, so existing CRs keep working.
package v1alpha1

module github.com/helm-locker/helm-locker/e2e/tools/flux

go 1.26.0

// Flux's source-controller: the e2e suite installs its CRDs (from the
// module's config/crd/bases) to run ManifestLocks against its sources.
require github.com/fluxcd/source-controller v1.9.6

//go:build tools

// Package tools pins Flux's source-controller, which the e2e suite runs
// (hack/tools.sh builds it) and whose CRDs it installs, so that
// ManifestLocks from Git, OCI and S3 are tested against the real thing.
package tools

import _ "github.com/fluxcd/source-controller"

// Package controller is the HelmRelease controller: it reads each
// registered release from Helm's storage, drives its lock state machine
// (package lock) from the release's status, hands the deployed manifest to
// the engine, and reports the outcome in the CR's status.
package controller

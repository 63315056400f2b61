// Package api holds the HelmRelease custom resource: its Go types, its CRD
// and the code that installs the CRD at startup.
package api

// Package manifest turns a Helm release, as Helm stores it, into the
// unstructured objects its manifest declares. Its errors name the release,
// the revision and the document at fault.
package manifest

// Package manifest turns manifests into the unstructured objects they
// declare: plain YAML or JSON as kubectl applies it (Parse), or a Helm
// release's stored manifest as the Helm that stored it applies it
// (ParseRelease). Its errors name
// the document at fault. It imports nothing of Helm's.
package manifest

// Package overlay turns a folder of an artifact's files into a manifest,
// as Flux's kustomize-controller does: a Kustomize build where the folder
// holds a kustomization, its YAML files otherwise.
//
// The files are a tenant's (whoever pushes to the Git repository, the
// bucket or the OCI repository), so the build runs on an in-memory copy
// of the artifact that holds nothing else, with Kustomize's builtin
// plugins only and its root-only load restrictor, and no network: before
// Kustomize reads a kustomization, every path it names is checked to be a
// file or folder of the artifact, and a remote base or file is refused
// without any attempt to fetch it.
package overlay

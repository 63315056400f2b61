// Package artifact downloads and unpacks the tar.gz artifacts Flux's
// source-controller publishes (and anything that writes an
// ExternalArtifact), as untrusted input: the download is capped and its
// digest checked before a byte of it is read, and it unpacks into memory
// only when every entry is a plain file or folder whose path stays inside
// the artifact, within caps on files and bytes. Anything else refuses the
// whole artifact: a lock never holds part of one.
//
// Flux's own fetch and tar packages download to disk and skip symlinks;
// a lock must refuse them instead, and keep what it builds from in
// memory, so this package does the little they do its own way.
package artifact

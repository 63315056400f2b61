// Package lock holds each release's lock state machine: unlocked, locked and
// reconciling, driven by the release's status in Helm's storage.
package lock

//go:build tools

// Package tools pins the etcd server that the e2e suite runs. Debian ships
// etcd 3.4, whose missing RequestWatchProgress breaks client-go's streaming
// lists; real clusters run 3.6.
package tools

import _ "go.etcd.io/etcd/server/v3"

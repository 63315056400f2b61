// Package e2e holds the end-to-end tests: they run against a real etcd and
// kube-apiserver and drive real helm v3 and v4 CLIs. See framework for the
// harness and controlplane for how the cluster is started.
package e2e

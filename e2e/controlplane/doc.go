// Package controlplane starts a real etcd and kube-apiserver on loopback
// ports, built from the Go module proxy by hack/tools.sh, so that e2e tests,
// benchmarks and the demo run against the same API server real clusters run.
//
// There is no controller-manager and no kubelet: pods never run, namespaces
// never finish deleting and ownerReference garbage collection never happens.
// Tests use fresh, uniquely named namespaces instead of deleting and reusing
// them.
package controlplane

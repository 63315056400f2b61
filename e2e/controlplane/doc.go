// Package controlplane starts a real etcd, kube-apiserver and
// kube-controller-manager on loopback ports, built from the Go module proxy
// by hack/tools.sh, so that e2e tests, benchmarks and the demo run against
// the same API server and controllers real clusters run.
//
// As in a real cluster, namespaces finish deleting, the garbage collector
// deletes dependents, the admin, edit and view ClusterRoles aggregate, every
// namespace gets a default ServiceAccount, and the Deployment controller
// writes ReplicaSets, status and the deployment.kubernetes.io/revision
// annotation. There is no scheduler and no kubelet: pods stay Pending, and
// Deployments never become Available.
package controlplane

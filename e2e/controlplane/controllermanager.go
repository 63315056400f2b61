package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// controllers are the kube-controller-manager controllers that run: all
// that are on by default, but those that need nodes or a cloud, which a
// control plane with no kubelet has not. nodeipam would also want a
// --cluster-cidr.
const controllers = "*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route"

// startControllerManager runs kube-controller-manager against the API
// server as a cluster admin, logging to kube-controller-manager.log.
//
// With --use-service-account-credentials each controller acts as a
// ServiceAccount of its own in kube-system, as in most distributions, so
// that the garbage collector deletes as
// system:serviceaccount:kube-system:generic-garbage-collector, the identity
// Prevent mode exempts. Its tokens are signed with the API server's key;
// --root-ca-file is what the root-ca-cert-publisher writes into every
// namespace's kube-root-ca.crt ConfigMap.
func (cp *ControlPlane) startControllerManager(path, serviceAccountKey string) error {
	p, err := StartProcess("kube-controller-manager", path, []string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig,
		"--authorization-kubeconfig=" + cp.Kubeconfig,
		"--service-account-private-key-file=" + serviceAccountKey,
		// kube-apiserver's self-signed serving certificate, with the CA
		// that signed it, from its --cert-dir.
		"--root-ca-file=" + filepath.Join(cp.Dir, "certs", "apiserver.crt"),
		"--use-service-account-credentials",
		// Each controller's client is throttled to 20 requests a second
		// by default: the endpoints of the bench's thousands of Services
		// then take a quarter of an hour, which a real cluster's spread
		// of creations never asks for at once.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		// One controller-manager per control plane: a Lease would only
		// add a renewal every 2 s.
		"--leader-elect=false",
		// No health or metrics port, so that control planes side by side
		// never clash on one.
		"--secure-port=0",
		"--controllers=" + controllers,
	}, filepath.Join(cp.Dir, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	cp.controllerManager = p
	return nil
}

// waitControllers waits until kube-controller-manager works: the
// clusterrole-aggregation controller has filled the admin ClusterRole, and
// the serviceaccount controller has made default's default ServiceAccount.
func (cp *ControlPlane) waitControllers(ctx context.Context, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var waiting error
	for {
		if err := cp.controllerManager.Exited(); err != nil {
			return fmt.Errorf("%v before its controllers worked\n%s", err, tail(cp.controllerManager.Log))
		}
		waiting = controllersWork(ctx, client)
		if waiting == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager not working after %s: %v\n%s", timeout, waiting, tail(cp.controllerManager.Log))
		case <-tick.C:
		}
	}
}

// controllersWork returns nil once the controllers waitControllers waits
// for have done their first work, and otherwise what is still missing.
func controllersWork(ctx context.Context, client kubernetes.Interface) error {
	admin, err := client.RbacV1().ClusterRoles().Get(ctx, "admin", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(admin.Rules) == 0 {
		return fmt.Errorf("the admin ClusterRole has no rules aggregated yet")
	}
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the default namespace has no default ServiceAccount yet")
		}
		return err
	}
	return nil
}

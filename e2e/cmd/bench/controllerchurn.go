package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// controllerChurnResult is what the locker did while the Deployment
// controller, kube-controller-manager's own, wrote the status of every
// locked Deployment: nothing, as in a real cluster.
type controllerChurnResult struct {
	Deployments int `json:"deployments"`
	// StatusWrites are the Deployment status writes the API server took
	// over the window, all the controller's: the bench writes none.
	StatusWrites float64 `json:"statusWrites"`
	LockerWrites float64 `json:"lockerWrites"`
	Drifts       int64   `json:"driftsDetected"`
}

// controllerChurn marks every pod of the releases' Deployments Ready, as a
// kubelet would (there is none), waits for the Deployment controller to
// write each Deployment's status from its ReplicaSet's, and then does the
// same with the pods not Ready. The controller writes status through the
// status subresource and its revision annotation: neither is drift.
func controllerChurn(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, l *locker, p params, quiet func() error) (*controllerChurnResult, error) {
	want := 0
	for _, r := range releaseRefs(p) {
		if r.gvr == deployGVR {
			want++
		}
	}
	if want == 0 {
		return nil, nil
	}
	writes0, drifts0, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	served0, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	for _, ready := range []bool{true, false} {
		if err := markPods(ctx, kube, ready); err != nil {
			return nil, err
		}
		if err := waitReadyReplicas(ctx, kube, want, ready); err != nil {
			return nil, err
		}
	}
	// Drift is recorded up to 2 s later (see bookkeepingDelay).
	time.Sleep(3 * time.Second)
	if err := quiet(); err != nil {
		return nil, err
	}
	writes1, drifts1, err := l.answers(ctx, dyn)
	if err != nil {
		return nil, err
	}
	served1, err := requestCounts(ctx, kube)
	if err != nil {
		return nil, err
	}
	res := &controllerChurnResult{Deployments: want, StatusWrites: controllerStatusWrites(served0, served1), LockerWrites: writes1 - writes0, Drifts: drifts1 - drifts0}
	fmt.Fprintf(os.Stderr, "bench: controller churn: %+v\n", *res)
	return res, nil
}

// controllerStatusWrites counts, between two of the API server's request
// counts, the Deployment status updates it took: the Deployment
// controller's, which updates where the bench patches.
func controllerStatusWrites(before, after map[string]float64) float64 {
	n := 0.0
	for k, v := range after {
		if strings.Contains(k, `resource="deployments"`) && strings.Contains(k, `subresource="status"`) && strings.Contains(k, `verb="PUT"`) && strings.Contains(k, `code="200"`) {
			n += v - before[k]
		}
	}
	return n
}

// markPods sets the Ready condition of every pod in the releases'
// namespaces that a ReplicaSet owns.
func markPods(ctx context.Context, kube kubernetes.Interface, ready bool) error {
	pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	status, err := json.Marshal(corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
	}})
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"status":%s}`, status)
	work := newPool(ctx)
	for _, pod := range pods.Items {
		if !strings.HasPrefix(pod.Namespace, "rel-") || len(pod.OwnerReferences) == 0 || pod.OwnerReferences[0].Kind != "ReplicaSet" {
			continue
		}
		work.send(func() error {
			_, err := kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubelet"}, "status")
			if err != nil {
				return fmt.Errorf("marking pod %s/%s Ready=%s: %w", pod.Namespace, pod.Name, cond, err)
			}
			return nil
		})
	}
	return work.wait()
}

// waitReadyReplicas waits, up to five minutes, until the Deployment
// controller says that want Deployments of the releases have all their
// replicas ready, or none.
func waitReadyReplicas(ctx context.Context, kube kubernetes.Interface, want int, ready bool) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list, err := kube.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, d := range list.Items {
			if strings.HasPrefix(d.Namespace, "rel-") && d.Spec.Replicas != nil && (d.Status.ReadyReplicas == *d.Spec.Replicas) == ready && (d.Status.ReadyReplicas == 0) == !ready {
				n++
			}
		}
		if n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Deployment controller wrote %d of %d Deployments with ready=%t within 5 minutes", n, want, ready)
		}
		time.Sleep(time.Second)
	}
}

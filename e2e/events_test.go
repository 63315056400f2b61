package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/helm-locker/helm-locker/internal/events"
)

// TestEventsBurst sends the API server more events at once than
// client-go's broadcaster holds, as a cold start of a few thousand
// releases does: through the broadcaster, 1,004 of these 3,000 were
// written and the rest dropped. Every one must be written.
func TestEventsBurst(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	var mu sync.Mutex
	dropped := map[string]int{}
	r := events.NewRecorder(env.Kube.CoreV1(), scheme.Scheme, corev1.EventSource{Component: "helm-locker-e2e"},
		events.Options{Dropped: func(reason string) { mu.Lock(); dropped[reason]++; mu.Unlock() }})
	const n = 3000
	for i := range n {
		r.Event(&corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("cm-%d", i)},
			corev1.EventTypeNormal, "Locked", "Locked revision 1")
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.Run(ctx)
	}()
	defer func() { cancel(); <-stopped }()
	start := time.Now()
	env.Eventually(t, 2*time.Minute, func() error {
		list, err := env.Kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != n {
			return fmt.Errorf("%d of %d events written", len(list.Items), n)
		}
		return nil
	})
	t.Logf("%d events written in %v", n, time.Since(start).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if len(dropped) != 0 {
		t.Errorf("dropped %v, want none", dropped)
	}
}

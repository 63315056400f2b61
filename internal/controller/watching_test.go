package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestWatchingLeavesOutForbiddenKinds: a kind the locker's RBAC does not
// let it list (the chart names the kinds it reads) is reported on the lock
// that holds it, as WatchForbidden naming the type, and not as the leader's
// unreadiness, which would last as long and hold the PodDisruptionBudget
// against a drain.
func TestWatchingLeavesOutForbiddenKinds(t *testing.T) {
	ctx := context.Background()
	c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
		dyn.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(cmGVR.GroupResource(), "", errors.New(`User "system:serviceaccount:registration:hl-helm-locker" cannot list resource "configmaps"`))
		})
	})
	c.cfg.Recorder = record.NewFakeRecorder(100)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr")); err != nil {
			t.Fatal(err)
		}
		if apierrors.IsForbidden(c.engine.WatchError(cmGVR)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap watch's error = %v, want Forbidden", c.engine.WatchError(cmGVR))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	if _, why := c.Watching(); strings.Contains(why, "configmaps") {
		t.Errorf("Watching: %q; a kind the locker may not read is no outage", why)
	}
	locked := meta.FindStatusCondition(statusOf(t, dyn).Conditions, v1alpha1.ConditionLocked)
	if locked == nil || locked.Reason != "WatchForbidden" || !strings.Contains(locked.Message, "configmaps") {
		t.Errorf("Locked = %+v, want WatchForbidden naming configmaps", locked)
	}
}

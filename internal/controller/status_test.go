package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/lock"
)

func TestFightMessageSuggestsIgnoreRule(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := engine.Fight{
		Ref:      engine.ObjectRef{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "ns", Name: "web.v2"},
		Kind:     "Deployment",
		Managers: []engine.Manager{{Name: "hpa", Operation: "Update", Time: at}},
		Paths:    []string{"/spec/replicas"},
		Until:    at.Add(10 * time.Second),
	}
	got := fightMessage(f)
	for _, want := range []string{
		"hpa (Update at 2026-01-02T03:04:05Z) keeps rewriting /spec/replicas of Deployment ns/web.v2",
		"corrections wait until 2026-01-02T03:04:15Z",
		`spec.ignore: {"paths": ["/spec/replicas"], "target": {"kind": "Deployment", "name": "web\\.v2"}}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("fightMessage = %q, want it to contain %q", got, want)
		}
	}
}

func TestNotLocked(t *testing.T) {
	cm := engine.ObjectRef{GVR: cmGVR, Namespace: "apps", Name: "cm"}
	optedOut := []v1alpha1.ObjectProblem{{Object: "ConfigMap apps/skip", Reason: "OptedOut"}}
	unresolved := []error{&engine.TypeError{Kind: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, Name: "w", Err: errors.New("no matches")}}
	syncErr := errors.Join(
		&engine.ObjectError{Ref: cm, Err: fmt.Errorf("patching: %w", apierrors.NewConflict(cmGVR.GroupResource(), "cm", errors.New("changed")))},
		&engine.ObjectError{Ref: cm, Err: &LockOpenError{Revision: 1, Latest: 2, Status: "pending-upgrade"}},
		&engine.ObjectError{Ref: cm, Err: apierrors.NewForbidden(cmGVR.GroupResource(), "cm", errors.New("no"))},
	)
	res := engine.Result{
		Unresolved: unresolved,
		Unverified: []engine.Unverified{{Ref: cm, Kind: "ConfigMap", Missing: true}},
		Failed:     []engine.Failure{{Ref: cm, Kind: "ConfigMap", Reason: engine.ReasonTooLarge, Err: errors.New("too large")}},
		Conflicts:  []engine.Conflict{{Ref: cm, Kind: "ConfigMap", Holder: helmReleaseKey("cattle-helm-system", "web").String()}},
		Waiting:    []engine.Waiting{{Ref: cm, Kind: "ConfigMap", Namespace: "apps"}},
	}
	var reasons []string
	problems := notLocked(optedOut, 2, res, syncErr)
	for _, p := range problems {
		reasons = append(reasons, p.Reason)
	}
	if diff := cmp.Diff([]string{"OptedOut", "NotAppliedByHelm", "TooLarge", "Conflict", "WaitingForNamespace", "TypeNotServed", "Conflict", "HelmOperationInProgress", "APIError"}, reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	if got, want := problems[3], "HelmRelease cattle-helm-system/web holds ConfigMap apps/cm"; got.Object != "ConfigMap apps/cm" || !strings.HasPrefix(got.Message, want) {
		t.Errorf("the conflict: %+v; want it to name the object and begin %q", got, want)
	}
	if got := manifestLockKey("team", "cms").String(); got != "ManifestLock team/cms" {
		t.Errorf("a ManifestLock's key names it %q", got)
	}
	many := make([]v1alpha1.ObjectProblem, 50)
	if got := len(notLocked(many, 1, engine.Result{}, nil)); got != v1alpha1.MaxNotLocked {
		t.Errorf("notLocked kept %d problems, want at most %d", got, v1alpha1.MaxNotLocked)
	}
}

// TestSameStatusAfterARoundTrip reads a status back the way the cache does
// and finds it the same as the one written, so it is not written again;
// a real change is still seen.
func TestSameStatusAfterARoundTrip(t *testing.T) {
	now := metav1.Now().Rfc3339Copy()
	written := v1alpha1.HelmReleaseStatus{
		State: v1alpha1.StateDeployed,
		LockStatus: v1alpha1.LockStatus{
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionTrue, Reason: "Locked", LastTransitionTime: now}},
			LastDrift: &v1alpha1.Drift{Object: "ConfigMap ns/cm", Paths: []string{"/data/key"}, Time: now, Corrected: true,
				Managers: []v1alpha1.FieldManager{{Manager: "kubectl-patch", Operation: "Update", Time: &now}}},
			DriftsDetected: 1, DriftsCorrected: 1,
			NotLocked: []v1alpha1.ObjectProblem{},
		},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1alpha1.HelmRelease{Status: written})
	if err != nil {
		t.Fatal(err)
	}
	var read v1alpha1.HelmRelease
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &read); err != nil {
		t.Fatal(err)
	}
	if !sameStatus(read.Status, written) {
		t.Errorf("the status read back differs from the one written:\n%+v\n%+v", read.Status, written)
	}
	changed := *written.DeepCopy()
	changed.DriftsCorrected = 2
	if sameStatus(read.Status, changed) {
		t.Error("sameStatus does not see a changed count")
	}
}

// TestStatusWithoutWatches: while a type's watch is not current, the lock
// claims nothing: Locked and Ready are Unknown, naming the type, and a
// release that was Deployed stays so.
func TestStatusWithoutWatches(t *testing.T) {
	tests := []struct {
		name      string
		was       v1alpha1.State
		wantState v1alpha1.State
	}{
		{name: "deployed before", was: v1alpha1.StateDeployed, wantState: v1alpha1.StateDeployed},
		{name: "never locked", was: v1alpha1.StateTransitioning, wantState: v1alpha1.StateTransitioning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr := &v1alpha1.HelmRelease{Status: v1alpha1.HelmReleaseStatus{State: tt.was, Version: 3}}
			st := &releaseState{held: held{rel: &storage.Release{Version: 3}, lock: lock.Lock{Phase: lock.Reconciling, Revision: 3}}}
			res := engine.Result{Objects: 2, Locked: 2, Unwatched: []schema.GroupVersionResource{cmGVR, {Group: "apps", Version: "v1", Resource: "deployments"}}}
			s := lockedStatus(hr, st, res, nil)
			if s.State != tt.wantState {
				t.Errorf("state %q, want %q", s.State, tt.wantState)
			}
			for _, typ := range []string{v1alpha1.ConditionLocked, v1alpha1.ConditionReady} {
				c := meta.FindStatusCondition(s.Conditions, typ)
				if c == nil || c.Status != metav1.ConditionUnknown || c.Reason != "WatchesNotSynced" || !strings.Contains(c.Message, "configmaps, deployments.apps") {
					t.Errorf("%s = %+v, want Unknown, WatchesNotSynced, naming configmaps and deployments.apps", typ, c)
				}
			}
		})
	}
}

// TestLockedConditionNamesTheWatchError: a watch that fails says why; one
// the locker's RBAC forbids is no passing outage, and has a reason of its
// own that tells what to grant.
func TestLockedConditionNamesTheWatchError(t *testing.T) {
	forbidden := fmt.Errorf("watching configmaps: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("User \"system:serviceaccount:reg:locker\" cannot list resource \"configmaps\"")))
	tests := []struct {
		name         string
		err          error
		status       metav1.ConditionStatus
		reason, text string
	}{
		{name: "not listed yet", err: nil, status: metav1.ConditionUnknown, reason: "WatchesNotSynced", text: "not listed yet"},
		{name: "unavailable", err: errors.New("watching configmaps: connection refused"), status: metav1.ConditionUnknown, reason: "WatchesNotSynced", text: "connection refused"},
		{name: "forbidden", err: forbidden, status: metav1.ConditionFalse, reason: "WatchForbidden", text: "cannot list resource \"configmaps\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr := &v1alpha1.HelmRelease{Status: v1alpha1.HelmReleaseStatus{Version: 3}}
			st := &releaseState{held: held{rel: &storage.Release{Version: 3}, lock: lock.Lock{Phase: lock.Reconciling, Revision: 3}}}
			res := engine.Result{Objects: 1, Locked: 1, Unwatched: []schema.GroupVersionResource{cmGVR}, WatchError: tt.err}
			c := meta.FindStatusCondition(lockedStatus(hr, st, res, nil).Conditions, v1alpha1.ConditionLocked)
			if c == nil || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.text) {
				t.Errorf("Locked = %+v, want %s/%s naming %q", c, tt.status, tt.reason, tt.text)
			}
		})
	}
}

// TestLockedConditionWhileWaiting: an object another lock holds, or one
// waiting for the lock's own namespace, keeps Locked False with a reason
// that says so, never a permanent failure's.
func TestLockedConditionWhileWaiting(t *testing.T) {
	cm := engine.ObjectRef{GVR: cmGVR, Namespace: "apps", Name: "cm"}
	tests := []struct {
		name       string
		res        engine.Result
		wantReason string
		wantIn     string
	}{
		{name: "conflict", res: engine.Result{Objects: 1, Conflicts: []engine.Conflict{{Ref: cm, Kind: "ConfigMap", Holder: manifestLockKey("team", "cms").String()}}},
			wantReason: "Conflict", wantIn: "ManifestLock team/cms holds ConfigMap apps/cm"},
		{name: "waiting for the namespace", res: engine.Result{Objects: 1, Waiting: []engine.Waiting{{Ref: cm, Kind: "ConfigMap", Namespace: "apps"}}},
			wantReason: "WaitingForNamespace", wantIn: "namespace apps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s v1alpha1.LockStatus
			heldLock(&s, 1, heldReport{lock: lock.Lock{Phase: lock.Reconciling, Revision: 1}, res: tt.res, of: "in the manifest"})
			c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionLocked)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantIn) {
				t.Errorf("Locked = %+v; want False, %s, its message containing %q", c, tt.wantReason, tt.wantIn)
			}
		})
	}
}

// TestStatusWriteOverAStaleCache: a status written while the cache still
// shows an older one replaces the status whole: what the write in between
// added, and this one drops, goes.
func TestStatusWriteOverAStaleCache(t *testing.T) {
	c, dyn := newTestController(t, helmRelease(nil), nil, nil)
	ctx := context.Background()
	cached := v1alpha1.HelmReleaseStatus{State: v1alpha1.StateTransitioning}
	between := v1alpha1.HelmReleaseStatus{State: v1alpha1.StateTransitioning,
		LockStatus: v1alpha1.LockStatus{NotLocked: []v1alpha1.ObjectProblem{{Object: "Widget one", Reason: "TypeNotServed"}}}}
	final := v1alpha1.HelmReleaseStatus{State: v1alpha1.StateDeployed, Version: 1}
	hr := &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-helm-system", Name: "hr"}, Status: cached}
	if _, err := c.writeStatus(ctx, hr, between); err != nil {
		t.Fatal(err)
	}
	if _, err := c.writeStatus(ctx, hr, final); err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, dyn); !sameStatus(got, final) {
		t.Errorf("status after two writes over a stale cache = %+v; want %+v", got, final)
	}
}

// TestUncheckedObjectIsNotLockedNorDrifted: an object whose every dry run
// the API server refuses (engine.Unchecked) keeps Locked and Ready False,
// reason Unchecked, naming it, where it differs and the refusal, in Warn
// mode too; it is no drift, and status.notLocked lists it.
func TestUncheckedObjectIsNotLockedNorDrifted(t *testing.T) {
	vwc := engine.ObjectRef{GVR: schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, Name: "wh-webstack"}
	refusal := errors.New(`validatingwebhookconfigurations.admissionregistration.k8s.io "wh-webstack" is forbidden: User "system:serviceaccount:apps:writer" cannot patch resource "validatingwebhookconfigurations"`)
	retry := time.Date(2026, 11, 23, 12, 1, 0, 0, time.UTC)
	res := engine.Result{Objects: 3, Locked: 2, Unchecked: []engine.Unchecked{
		{Ref: vwc, Kind: "ValidatingWebhookConfiguration", Paths: []string{"/webhooks/0/rules"}, Err: refusal, RetryAt: retry},
	}}
	for _, tt := range []struct {
		name string
		lock lock.Lock
	}{
		{name: "enforce", lock: lock.Lock{Phase: lock.Reconciling, Revision: 3}},
		{name: "warn", lock: lock.Lock{Phase: lock.Watching, Revision: 3, Warn: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hr := &v1alpha1.HelmRelease{Status: v1alpha1.HelmReleaseStatus{Version: 3}}
			st := &releaseState{held: held{rel: &storage.Release{Version: 3}, lock: tt.lock}}
			s := lockedStatus(hr, st, res, nil)
			for _, typ := range []string{v1alpha1.ConditionLocked, v1alpha1.ConditionReady} {
				c := meta.FindStatusCondition(s.Conditions, typ)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonUnchecked {
					t.Errorf("%s = %+v, want False, Unchecked", typ, c)
					continue
				}
				for _, want := range []string{
					"1 of 3 objects of revision 3 could not be checked",
					"ValidatingWebhookConfiguration wh-webstack differs at /webhooks/0/rules",
					`User "system:serviceaccount:apps:writer" cannot patch`,
					"tried again at 2026-11-23T12:01:00Z",
				} {
					if !strings.Contains(c.Message, want) {
						t.Errorf("%s message %q lacks %q", typ, c.Message, want)
					}
				}
			}
			if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionDrifted); c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("Drifted = %+v, want False", c)
			}
			if len(s.NotLocked) != 1 || s.NotLocked[0].Reason != v1alpha1.ReasonUnchecked || s.NotLocked[0].Object != "ValidatingWebhookConfiguration wh-webstack" {
				t.Errorf("notLocked = %+v, want the webhook configuration, Unchecked", s.NotLocked)
			}
		})
	}
}

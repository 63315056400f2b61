package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"
)

// TestPermanentFailureIsReportedOnceAndRetriedEveryMinute: a write the API
// server refuses for good is reported once, with its reason, and tried
// again only after PermanentRetry; a transient error is returned for the
// caller's backoff.
func TestPermanentFailureIsReportedOnceAndRetriedEveryMinute(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name       string
		err        error
		wantReason string // "" for a transient error
	}{
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), ReasonTooLarge},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c", field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), "Bad_Name", "a lowercase RFC 1123 subdomain")}), ReasonInvalid},
		{"immutable", apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "j", field.ErrorList{field.Invalid(field.NewPath("spec", "template"), "{}", "field is immutable")}), ReasonImmutable},
		{"forbidden", apierrors.NewForbidden(cm, "c", errors.New(`User "system:serviceaccount:t:sa" cannot create resource "configmaps"`)), ReasonForbidden},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"), ReasonNamespaceNotFound},
		// A CRD being deleted refuses creates of its kind; the type may
		// come back (see TestWaitingForTheSetsCRD for the set's own CRD).
		{"CRD terminating", apierrors.NewForbidden(cm, "c", errors.New("create not allowed while custom resource definition is terminating")), ""},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), ""},
		{"server error", apierrors.NewInternalError(errors.New("etcd is away")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			e, client, _ := newTestEngine(t)
			e.opts.Now = func() time.Time { return now }
			creates := 0
			client.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
				creates++
				return true, nil, tc.err
			})
			e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})

			res, err := e.Sync(ctx, "k")
			if tc.wantReason == "" {
				if err == nil || len(res.Failed) != 0 {
					t.Fatalf("Sync = %+v, %v; want the transient error returned", res, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Sync returned %v; a permanent failure is not an error to retry at once", err)
			}
			if len(res.Failed) != 1 || res.Failed[0].Reason != tc.wantReason || !res.Failed[0].RetryAt.Equal(now.Add(PermanentRetry)) {
				t.Fatalf("failed = %+v, want one %s retried at %s", res.Failed, tc.wantReason, now.Add(PermanentRetry))
			}
			if len(res.Drifts) != 1 || res.Drifts[0].Err == nil || res.Drifts[0].Held {
				t.Errorf("first drift = %+v, want it reported with its error", res.Drifts)
			}
			if res.RequeueAfter != PermanentRetry || res.InLine {
				t.Errorf("RequeueAfter = %s, InLine = %v; want %s and not in line", res.RequeueAfter, res.InLine, PermanentRetry)
			}

			// Syncs before the minute is up write nothing.
			now = now.Add(30 * time.Second)
			res, err = e.Sync(ctx, "k")
			if err != nil || creates != 1 || len(res.Failed) != 1 || len(res.Drifts) != 1 || !res.Drifts[0].Held {
				t.Errorf("Sync within the minute = %+v, %v, %d creates; want held, one create", res, err, creates)
			}

			// The next try fails alike: tried once more, not reported again.
			now = now.Add(31 * time.Second)
			res, err = e.Sync(ctx, "k")
			if err != nil || creates != 2 || len(res.Drifts) != 1 || !res.Drifts[0].Held || res.Drifts[0].Err != nil {
				t.Errorf("Sync after the minute = %+v, %v, %d creates; want one more create, held", res, err, creates)
			}
		})
	}
}

// TestFailureClearsOnceInLine: an object someone else fixes is no longer
// reported as failing.
func TestFailureClearsOnceInLine(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	client.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns")
	})
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
	if res, _ := e.Sync(ctx, "k"); len(res.Failed) != 1 {
		t.Fatalf("failed = %+v, want one", res.Failed)
	}
	fixed := configMap(t, "declared")
	fixed.SetNamespace("ns")
	if err := client.Tracker().Create(cmGVR, fixed, "ns"); err != nil {
		t.Fatal(err)
	}
	live, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, live)
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Failed) != 0 {
		t.Errorf("Sync after the fix = %+v, %v; want in line, nothing failing", res, err)
	}
}

// TestShortRefusal: an Invalid or Immutable refusal is told in one line,
// each field with its reason and without the value the API server
// repeats; the API server's error stays within.
func TestShortRefusal(t *testing.T) {
	template := strings.Repeat(`core.PodTemplateSpec{ObjectMeta:v1.ObjectMeta{Name:"", Labels:map[string]string{"a": "b"}}} `, 30)
	immutable := apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "migrate", field.ErrorList{
		field.Invalid(field.NewPath("spec", "template"), template, "field is immutable"),
		field.Invalid(field.NewPath("spec", "template"), template, "field is immutable"),
		field.Required(field.NewPath("spec", "selector"), ""),
	})
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "immutable", err: immutable,
			want: "patching: Job migrate is invalid: spec.template: field is immutable; spec.selector: Required value"},
		{name: "not a refusal", err: apierrors.NewConflict(schema.GroupResource{Resource: "jobs"}, "migrate", errors.New("changed")),
			want: `patching: Operation cannot be fulfilled on jobs "migrate": changed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shortRefusal("patching", tt.err)
			if got.Error() != tt.want {
				t.Errorf("shortRefusal = %q\nwant %q", got, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("shortRefusal does not wrap the API server's error")
			}
			if permanentReason(got) != permanentReason(tt.err) {
				t.Errorf("permanentReason changed from %q to %q", permanentReason(tt.err), permanentReason(got))
			}
		})
	}
}

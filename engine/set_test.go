package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWaitLocked(t *testing.T) {
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	tests := []struct {
		name string
		res  Result
		err  error
		// want is "" for nil, or a part of the error.
		want string
	}{
		{name: "in line", res: Result{Objects: 1, Locked: 1, InLine: true}},
		{name: "refused for good", res: Result{Objects: 1, Failed: []Failure{{Ref: ref, Reason: ReasonInvalid, Err: errors.New("bad value")}}},
			want: "set s cannot be locked: configmaps/ns/c: Invalid: bad value"},
		{name: "no namespace", res: Result{Objects: 1, Unresolved: []error{errors.New("ConfigMap is namespaced but declares no namespace")}},
			want: "cannot be locked: ConfigMap is namespaced"},
		{name: "kind not served yet", res: Result{Objects: 1, Unresolved: []error{&TypeError{Kind: schema.GroupVersionKind{Group: "x", Version: "v1", Kind: "Y"}, Name: "y", Err: errors.New("no matches")}}},
			want: "is not locked yet: 0 of 1 objects in line; x/v1, Kind=Y y: kind not served"},
		{name: "transient error", res: Result{Objects: 1, InLine: true}, err: errors.New("connection refused"),
			want: "is not locked yet: connection refused"},
		{name: "held by another set", res: Result{Objects: 1, Conflicts: []Conflict{{Ref: ref, Kind: "ConfigMap", Holder: "other"}}},
			want: "cannot be locked: configmaps/ns/c: held by set other"},
		{name: "waiting for its namespace", res: Result{Objects: 1, Waiting: []Waiting{{Ref: ref, Kind: "ConfigMap", Namespace: "ns"}}},
			want: "is not locked yet: 0 of 1 objects in line; configmaps/ns/c: waiting for namespace ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{name: "s", changed: make(chan struct{})}
			s.observe(0, tt.res, tt.err)
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			err := s.WaitLocked(ctx)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("WaitLocked = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("WaitLocked = %v; want an error containing %q", err, tt.want)
			}
			var nl *NotLockedError
			if errors.As(err, &nl) == errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitLocked = %v: want either a NotLockedError or the context's error", err)
			}
		})
	}
}

// TestSetObserve: a sync that began under an older declaration says
// nothing of the current one, a waiter wakes at each sync, and OnDrift
// hears of others' changes alone, once each: not the set's own creations
// and changes (Applying), nor a drift held since it was reported.
func TestSetObserve(t *testing.T) {
	var reported []string
	s := &Set{name: "s", changed: make(chan struct{}), opts: setOptions{onDrift: func(d Drift) {
		reported = append(reported, d.Ref.Name)
	}}}
	s.gen = 2
	created := Drift{Ref: ObjectRef{Name: "created"}, Deleted: true, Corrected: true, Applying: true}
	updated := Drift{Ref: ObjectRef{Name: "updated"}, Paths: []string{"/data/key"}, Corrected: true, Applying: true}
	edited := Drift{Ref: ObjectRef{Name: "edited"}, Paths: []string{"/data/key"}, Corrected: true}
	recreated := Drift{Ref: ObjectRef{Name: "created"}, Deleted: true, Corrected: true}
	refused := Drift{Ref: ObjectRef{Name: "job"}, Paths: []string{"/spec/template"}, Err: errors.New("immutable")}
	held := Drift{Ref: ObjectRef{Name: "job"}, Paths: []string{"/spec/template"}, Held: true}

	waiting := make(chan error, 1)
	go func() { waiting <- s.WaitLocked(t.Context()) }()
	s.observe(1, Result{InLine: true}, nil) // of the old declaration
	if r, ok := s.Result(); ok {
		t.Fatalf("a stale sync was recorded: %+v", r)
	}
	s.observe(2, Result{Drifts: []Drift{created, updated, edited}}, errors.New("conflict"))
	s.observe(2, Result{InLine: true}, nil)
	if err := <-waiting; err != nil {
		t.Fatalf("WaitLocked = %v", err)
	}
	s.observe(2, Result{InLine: true, Drifts: []Drift{recreated}}, nil)
	s.observe(2, Result{Drifts: []Drift{refused}}, nil)
	for range 4 {
		s.observe(2, Result{Drifts: []Drift{held}}, nil)
	}
	if diff := cmp.Diff([]string{"edited", "created", "job"}, reported); diff != "" {
		t.Errorf("reported drifts (-want +got):\n%s", diff)
	}
	// Created while applying, once; recreated after, it was already.
	if diff := cmp.Diff([]ObjectRef{{Name: "created"}}, s.Created()); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
}

func TestIgnoreFunc(t *testing.T) {
	deploy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "apps"}}}
	tests := []struct {
		name  string
		rules []IgnoreRule
		want  []string
	}{
		{"every object", []IgnoreRule{{Paths: []string{"/metadata/labels/x"}}}, []string{"/metadata/labels/x"}},
		{"by kind", []IgnoreRule{{Kind: "Deployment", Paths: []string{"/spec/replicas"}}, {Kind: "StatefulSet", Paths: []string{"/spec"}}}, []string{"/spec/replicas"}},
		{"by group and name", []IgnoreRule{{Group: "apps", Name: "web", Paths: []string{"/a"}}, {Group: "apps", Name: "api", Paths: []string{"/b"}}}, []string{"/a"}},
		{"by namespace", []IgnoreRule{{Namespace: "other", Paths: []string{"/a"}}}, nil},
		{"by version", []IgnoreRule{{Version: "v1", Paths: []string{"/a"}}, {Version: "v2", Paths: []string{"/b"}}}, []string{"/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range ignoreFunc(tt.rules)(deploy) {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ignored (-want +got):\n%s", diff)
			}
		})
	}
	if ignoreFunc(nil) != nil {
		t.Error("no rules should ignore nothing, with no function")
	}
}

func TestDeclaredTypes(t *testing.T) {
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "widgets.example.com"},
			"spec": map[string]any{"group": "example.com", "names": map[string]any{"kind": "Widget"}}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "apps"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}},
	}
	crds, namespaces := declaredTypes(objs)
	if diff := cmp.Diff(map[schema.GroupKind]bool{{Group: "example.com", Kind: "Widget"}: true}, crds); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"apps": true}, namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
}

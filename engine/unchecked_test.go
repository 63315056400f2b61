package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
)

// dryRunAnswer is how the fake API server answers one identity's dry-run
// patches.
type dryRunAnswer int

const (
	// refuses: Forbidden, as RBAC refuses an identity that may not patch.
	refuses dryRunAnswer = iota
	// normalizes: the object unchanged, as the server answers a patch
	// whose declared value it stores in the live form (the mismatch is
	// form only).
	normalizes
	// applies: the object patched (the mismatch is drift).
	applies
)

// caller is one client of the fake API server, server: it counts the
// dry runs it made and the writes it sent, and answers its dry runs as
// answer says. Its other requests go to server's tracker.
type caller struct {
	user            string
	answer          dryRunAnswer
	dryRuns, writes int
	server, client  *dynamicfake.FakeDynamicClient
}

// newCaller answers the patches of client, a client of server (itself
// when they are the same).
func newCaller(server, client *dynamicfake.FakeDynamicClient, user string, answer dryRunAnswer) *caller {
	id := &caller{user: user, answer: answer, server: server, client: client}
	client.PrependReactor("patch", "configmaps", id.react)
	return id
}

// edit sets data.key of the live ConfigMap, as another actor, past the
// identities' reactors.
func edit(t *testing.T, server *dynamicfake.FakeDynamicClient, v string) *unstructured.Unstructured {
	t.Helper()
	current, err := server.Tracker().Get(cmGVR, "ns", "c")
	if err != nil {
		t.Fatal(err)
	}
	u := current.(*unstructured.Unstructured).DeepCopy()
	if err := unstructured.SetNestedField(u.Object, v, "data", "key"); err != nil {
		t.Fatal(err)
	}
	if err := server.Tracker().Update(cmGVR, u, "ns"); err != nil {
		t.Fatal(err)
	}
	return u
}

func (id *caller) forbidden(name string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name,
		fmt.Errorf("User %q cannot patch resource \"configmaps\" in API group \"\" in the namespace \"ns\"", id.user))
}

func (id *caller) react(action clienttesting.Action) (bool, runtime.Object, error) {
	patch := action.(clienttesting.PatchActionImpl)
	if len(patch.PatchOptions.DryRun) == 0 {
		id.writes++
		if id.answer == refuses {
			return true, nil, id.forbidden(patch.GetName())
		}
		return false, nil, nil
	}
	id.dryRuns++
	switch id.answer {
	case refuses:
		return true, nil, id.forbidden(patch.GetName())
	case normalizes:
		current, err := id.server.Tracker().Get(cmGVR, patch.GetNamespace(), patch.GetName())
		return true, current, err
	default:
		current, err := id.server.Tracker().Get(cmGVR, patch.GetNamespace(), patch.GetName())
		if err != nil {
			return true, nil, err
		}
		out, err := mergeConfigMap(current, patch.GetPatch())
		return true, out, err
	}
}

// TestUncheckedWhenEveryDryRunIsRefused: a first mismatch that no identity
// may dry-run cannot be told from the server's form. It is no drift, is
// not written, and is reported as Unchecked; a dry run any identity may
// make decides as before.
func TestUncheckedWhenEveryDryRunIsRefused(t *testing.T) {
	ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
	const writerUser, engineUser = "system:serviceaccount:ns:writer", "system:serviceaccount:locker:helm-locker"
	for _, tc := range []struct {
		name string
		// withWriter gives the set a Writer, which answers as writer
		// does; the engine's own client answers as engine does.
		withWriter     bool
		writer, engine dryRunAnswer
		wantDryRuns    [2]int // the writer's, the engine's
		wantInLine     bool
		wantDrifts     int
		wantFailed     []string // reasons
		// wantUnchecked names the identities the refusal names.
		wantUnchecked []string
	}{{
		name:       "the writer's and the engine's dry runs refused",
		withWriter: true, writer: refuses, engine: refuses,
		wantDryRuns: [2]int{1, 1}, wantUnchecked: []string{writerUser, engineUser},
	}, {
		name:        "the engine's dry run refused, with no writer",
		engine:      refuses,
		wantDryRuns: [2]int{0, 1}, wantUnchecked: []string{engineUser},
	}, {
		name:       "the writer's refused, the engine's finds the server's form",
		withWriter: true, writer: refuses, engine: normalizes,
		wantDryRuns: [2]int{1, 1}, wantInLine: true,
	}, {
		name:       "the writer's refused, the engine's confirms drift",
		withWriter: true, writer: refuses, engine: applies,
		wantDryRuns: [2]int{1, 1}, wantDrifts: 1, wantFailed: []string{ReasonForbidden},
	}, {
		name:       "the writer's finds the server's form",
		withWriter: true, writer: normalizes, engine: refuses,
		wantDryRuns: [2]int{1, 0}, wantInLine: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			e, client, _ := newTestEngine(t)
			e.opts.Now = func() time.Time { return now }
			live := configMap(t, "stored form")
			live.SetNamespace("ns")
			if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
				t.Fatal(err)
			}
			engine := newCaller(client, client, engineUser, tc.engine)
			spec := ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"}
			writer := &caller{}
			if tc.withWriter {
				writer = newCaller(client, dynamicfake.NewSimpleDynamicClient(scheme.Scheme), writerUser, tc.writer)
				spec.Writer = writer.client
			}
			e.Declare("k", spec)

			res, err := e.Sync(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if got := [2]int{writer.dryRuns, engine.dryRuns}; got != tc.wantDryRuns {
				t.Errorf("dry runs (writer, engine) = %v, want %v", got, tc.wantDryRuns)
			}
			if writer.writes+engine.writes != 0 || valueOrEmpty(t, client) != "stored form" {
				t.Errorf("%d writes, data.key %q; want none, the live value kept", writer.writes+engine.writes, valueOrEmpty(t, client))
			}
			if res.InLine != tc.wantInLine || len(res.Drifts) != tc.wantDrifts || res.Drifted != tc.wantDrifts {
				t.Errorf("InLine %v, drifts %+v, Drifted %d; want %v, %d and %d", res.InLine, res.Drifts, res.Drifted, tc.wantInLine, tc.wantDrifts, tc.wantDrifts)
			}
			var failed []string
			for _, f := range res.Failed {
				failed = append(failed, f.Reason)
			}
			if diff := cmp.Diff(tc.wantFailed, failed); diff != "" {
				t.Errorf("failed reasons (-want +got):\n%s", diff)
			}
			if tc.wantUnchecked == nil {
				if len(res.Unchecked) != 0 {
					t.Errorf("unchecked = %+v, want none", res.Unchecked)
				}
				return
			}
			want := []Unchecked{{Ref: ref, Kind: "ConfigMap", Paths: []string{"/data/key"}, RetryAt: now.Add(UncheckedRetry)}}
			if diff := cmp.Diff(want, res.Unchecked, cmpopts.IgnoreFields(Unchecked{}, "Err")); diff != "" {
				t.Fatalf("unchecked (-want +got):\n%s", diff)
			}
			refusal := res.Unchecked[0].Err
			if !apierrors.IsForbidden(refusal) {
				t.Errorf("the refusal %v is not Forbidden", refusal)
			}
			for _, user := range tc.wantUnchecked {
				if refusal == nil || !strings.Contains(refusal.Error(), user) {
					t.Errorf("the refusal %v does not name %s", refusal, user)
				}
			}
			if res.RequeueAfter != UncheckedRetry {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, UncheckedRetry)
			}
		})
	}
}

// TestUncheckedIsTriedAgain: an unchecked object is dry-run again once
// UncheckedRetry is up, not before; in between, its checks say where it
// differs now, and it is held as usual once it comes in line or a dry run
// is allowed.
func TestUncheckedIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	e, client, _ := newTestEngine(t)
	e.opts.Now = func() time.Time { return now }
	live := configMap(t, "stored form")
	live.SetNamespace("ns")
	if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
		t.Fatal(err)
	}
	engine := newCaller(client, client, "system:serviceaccount:locker:helm-locker", refuses)
	writer := newCaller(client, dynamicfake.NewSimpleDynamicClient(scheme.Scheme), "system:serviceaccount:ns:writer", refuses)
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns", Writer: writer.client})
	sync := func(step string, wantDryRuns int, wantUnchecked bool) Result {
		t.Helper()
		res, err := e.Sync(ctx, "k")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := writer.dryRuns + engine.dryRuns; got != wantDryRuns {
			t.Errorf("%s: %d dry runs so far, want %d", step, got, wantDryRuns)
		}
		if writer.writes+engine.writes != 0 || len(res.Drifts) != 0 || res.Drifted != 0 || len(res.Failed) != 0 {
			t.Errorf("%s: %d writes, drifts %+v, Drifted %d, failed %+v; want none", step, writer.writes+engine.writes, res.Drifts, res.Drifted, res.Failed)
		}
		if (len(res.Unchecked) == 1) != wantUnchecked || res.InLine == wantUnchecked {
			t.Errorf("%s: unchecked %+v, InLine %v; want unchecked %v", step, res.Unchecked, res.InLine, wantUnchecked)
		}
		return res
	}

	sync("the first check", 2, true)
	// The object stays dirty, so every Sync checks it: within the
	// minute, without a dry run.
	now = now.Add(30 * time.Second)
	sync("a Sync within the minute", 2, true)

	// An edit within the minute is no drift either: the check names
	// where the object differs now.
	e.onEvent(cmGVR, edit(t, client, "edited"))
	res := sync("an edit within the minute", 2, true)
	if !res.Unchecked[0].RetryAt.Equal(now.Add(-30*time.Second).Add(UncheckedRetry)) || res.RequeueAfter != 30*time.Second {
		t.Errorf("RetryAt %s, RequeueAfter %s; want the first check's minute kept", res.Unchecked[0].RetryAt, res.RequeueAfter)
	}

	// After the minute, both dry runs again.
	now = now.Add(31 * time.Second)
	sync("the retry", 4, true)

	// A grant: the engine's next dry run shows the server's form.
	now = now.Add(UncheckedRetry)
	engine.answer = normalizes
	sync("the retry after a grant", 6, false)
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || res.Locked != 1 {
		t.Errorf("Sync after the grant = %+v, %v; want in line", res, err)
	}

	// Someone else's change is then drift, dry-run no more: reported
	// and, the writer being refused, not written.
	e.onEvent(cmGVR, edit(t, client, "changed"))
	if res, err := e.Sync(ctx, "k"); err != nil || res.Drifted != 1 || len(res.Unchecked) != 0 || writer.dryRuns+engine.dryRuns != 6 {
		t.Errorf("Sync after a change = %+v, %v, %d dry runs; want the drift reported with no dry run", res, err, writer.dryRuns+engine.dryRuns)
	}
}

// TestUncheckedObjectComesInLine: an unchecked object that someone puts
// as declared is in line, and no longer unchecked.
func TestUncheckedObjectComesInLine(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	live := configMap(t, "stored form")
	live.SetNamespace("ns")
	if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
		t.Fatal(err)
	}
	newCaller(client, client, "system:serviceaccount:locker:helm-locker", refuses)
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
	if res, err := e.Sync(ctx, "k"); err != nil || len(res.Unchecked) != 1 {
		t.Fatalf("first Sync = %+v, %v; want one unchecked", res, err)
	}
	e.onEvent(cmGVR, edit(t, client, "declared"))
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Unchecked) != 0 || res.RequeueAfter != 0 {
		t.Errorf("Sync once as declared = %+v, %v; want in line, nothing unchecked, no requeue", res, err)
	}
}

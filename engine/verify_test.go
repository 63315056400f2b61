package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// since is when the owner began applying the declaration in these tests.
var since = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// managed is a managedFields entry owning data.key, or another key.
func managed(manager string, at time.Time, ownsKey bool) metav1.ManagedFieldsEntry {
	fields := `{"f:data":{"f:other":{}}}`
	if ownsKey {
		fields = `{"f:data":{"f:key":{}}}`
	}
	t := metav1.NewTime(at)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// dryRunReactor answers dry-run patches of ConfigMaps without storing
// them: with the object unchanged when normalizes is set (as the API server
// answers a patch it stores in another form), else with the patch applied.
func dryRunReactor(client *dynamicfake.FakeDynamicClient, normalizes bool, dryRuns *int) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		patch := action.(clienttesting.PatchActionImpl)
		if len(patch.PatchOptions.DryRun) == 0 {
			return false, nil, nil
		}
		*dryRuns++
		current, err := client.Tracker().Get(cmGVR, patch.GetNamespace(), patch.GetName())
		if err != nil {
			return true, nil, err
		}
		if normalizes {
			return true, current, nil
		}
		out, err := mergeConfigMap(current, patch.GetPatch())
		return true, out, err
	}
}

// TestVerification holds a declaration written by someone other than its
// owner to what the owner was seen to apply: objects the owner never
// created stay missing, values it applied for an older declaration stay,
// and drift made by others after the owner's apply is reverted.
func TestVerification(t *testing.T) {
	before, after := since.Add(-time.Hour), since.Add(time.Second)
	for _, tc := range []struct {
		name string
		// live is the live data.key and its managedFields; no live
		// object when nil.
		live     *string
		managers []metav1.ManagedFieldsEntry
		// needed is Verification.Needed's answer.
		needed     bool
		normalizes bool
		wantValue  string // "" when the object must not exist
		want       []Unverified
		wantDryRun int
		// wantApplied is Result.Applied: the object showed the
		// owner's write since, evidence the owner applied it.
		wantApplied int
		// fallback is data.key as the last verified declaration had
		// it; "" for no such declaration.
		fallback string
	}{{
		name: "missing object is not created", needed: true,
		want: []Unverified{{Missing: true}},
	}, {
		name: "missing object carried over from a verified declaration is created", needed: false,
		wantValue: "declared",
	}, {
		name: "object as declared is verified, but shows no apply", needed: true,
		live: ptr("declared"), managers: []metav1.ManagedFieldsEntry{managed("helm", before, true)},
		wantValue: "declared",
	}, {
		name: "object as declared and written by the owner since counts as applied", needed: true,
		live: ptr("declared"), managers: []metav1.ManagedFieldsEntry{managed("helm", after, true)},
		wantValue: "declared", wantApplied: 1,
	}, {
		name: "object restated, written by the owner since but as the last declaration had it, counts as no apply", needed: true,
		live: ptr("declared"), managers: []metav1.ManagedFieldsEntry{managed("helm", after, true)}, fallback: "declared",
		wantValue: "declared",
	}, {
		name: "object changed from the last declaration and written by the owner since counts as applied", needed: true,
		live: ptr("declared"), managers: []metav1.ManagedFieldsEntry{managed("helm", after, true)}, fallback: "old",
		wantValue: "declared", wantApplied: 1,
	}, {
		name: "object carried over counts as no apply", needed: false,
		live: ptr("declared"), managers: []metav1.ManagedFieldsEntry{managed("helm", after, true)},
		wantValue: "declared",
	}, {
		name: "value the owner applied for an older declaration stays", needed: true,
		live: ptr("old"), managers: []metav1.ManagedFieldsEntry{managed("helm", before, true)},
		wantValue: "old", want: []Unverified{{Paths: []string{"/data/key"}, Owned: []string{"/data/key"}}}, wantDryRun: 1,
	}, {
		name: "owner's value stays even when the owner wrote since", needed: true,
		live: ptr("old"), managers: []metav1.ManagedFieldsEntry{managed("helm", after, true)},
		wantValue: "old", want: []Unverified{{Paths: []string{"/data/key"}, Owned: []string{"/data/key"}}}, wantDryRun: 1,
	}, {
		name: "drift by another writer after the owner's apply is reverted", needed: true,
		live:      ptr("edited"),
		managers:  []metav1.ManagedFieldsEntry{managed("helm", after, false), managed("kubectl-edit", after, true)},
		wantValue: "declared", wantApplied: 1,
	}, {
		name: "drift of a key in a map the owner created is reverted", needed: true,
		live: ptr("edited"),
		managers: []metav1.ManagedFieldsEntry{
			{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &metav1.Time{Time: after},
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:other":{}}}`)}},
			managed("kubectl-edit", after, true)},
		wantValue: "declared", wantApplied: 1,
	}, {
		name: "another writer's value with no owner write since stays", needed: true,
		live:      ptr("edited"),
		managers:  []metav1.ManagedFieldsEntry{managed("helm", before, false), managed("kubectl-edit", before, true)},
		wantValue: "edited", want: []Unverified{{Paths: []string{"/data/key"}}}, wantDryRun: 1,
	}, {
		name: "another writer's edit from before the revision stays", needed: true,
		live:      ptr("edited"),
		managers:  []metav1.ManagedFieldsEntry{managed("helm", after, false), managed("kubectl-edit", before, true)},
		wantValue: "edited", want: []Unverified{{Paths: []string{"/data/key"}}}, wantDryRun: 1,
	}, {
		name: "a field the object lacks is not added", needed: true,
		live:      ptr(""),
		managers:  []metav1.ManagedFieldsEntry{managed("helm", after, false)},
		wantValue: "", want: []Unverified{{Paths: []string{"/data/key"}}}, wantDryRun: 1,
	}, {
		name: "a difference of form only is verified by a dry run and not written", needed: true, normalizes: true,
		live: ptr("old"), managers: []metav1.ManagedFieldsEntry{managed("helm", before, true)},
		wantValue: "old", wantDryRun: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngine(t)
			dryRuns := 0
			client.PrependReactor("patch", "configmaps", dryRunReactor(client, tc.normalizes, &dryRuns))
			if tc.live != nil {
				live := configMap(t, *tc.live)
				if *tc.live == "" {
					unstructured.RemoveNestedField(live.Object, "data", "key")
				}
				live.SetNamespace("ns")
				live.SetManagedFields(tc.managers)
				if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
					t.Fatal(err)
				}
			}
			e.Declare("k", ObjectSet{
				Objects:          []*unstructured.Unstructured{configMap(t, "declared")},
				DefaultNamespace: "ns",
				Verify: &Verification{Owners: []string{"helm"}, Since: since,
					Needed: func(*unstructured.Unstructured) bool { return tc.needed },
					Fallback: func(*unstructured.Unstructured) *unstructured.Unstructured {
						if tc.fallback == "" {
							return nil
						}
						return configMap(t, tc.fallback)
					}},
			})
			// Twice: an object found unverified is not checked again
			// while it does not change.
			var res Result
			for range 2 {
				var err error
				if res, err = e.Sync(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			}
			ref := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}
			for i := range tc.want {
				tc.want[i].Ref, tc.want[i].Kind = ref, "ConfigMap"
			}
			if diff := cmp.Diff(tc.want, res.Unverified); diff != "" {
				t.Errorf("unverified (-want +got):\n%s", diff)
			}
			if res.InLine != (len(tc.want) == 0) {
				t.Errorf("InLine = %v with %d unverified", res.InLine, len(res.Unverified))
			}
			for _, d := range res.Drifts {
				if d.Corrected != (tc.wantValue == "declared" && (tc.live == nil || *tc.live != "declared")) {
					t.Errorf("drift %+v", d)
				}
			}
			if got := valueOrEmpty(t, client); got != tc.wantValue {
				t.Errorf("data.key = %q, want %q", got, tc.wantValue)
			}
			if dryRuns != tc.wantDryRun {
				t.Errorf("%d dry runs, want %d", dryRuns, tc.wantDryRun)
			}
			if res.Applied != tc.wantApplied {
				t.Errorf("Applied = %d, want %d", res.Applied, tc.wantApplied)
			}
		})
	}
}

// TestVerifiedObjectIsHeldFromThenOn: a later edit never verifies an
// object; once it comes in line, any later drift is reverted.
func TestVerifiedObjectIsHeldFromThenOn(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	dryRuns := 0
	client.PrependReactor("patch", "configmaps", dryRunReactor(client, false, &dryRuns))
	live := configMap(t, "old")
	live.SetNamespace("ns")
	live.SetManagedFields([]metav1.ManagedFieldsEntry{managed("helm", since.Add(-time.Hour), true)})
	if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{
		Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns",
		Verify: &Verification{Owners: []string{"helm"}, Since: since},
	})
	if res, err := e.Sync(ctx, "k"); err != nil || len(res.Unverified) != 1 {
		t.Fatalf("first Sync = %+v, %v; want one unverified", res, err)
	}
	// An admin's edit after the first check does not verify it: the
	// edit stays.
	edited := drift(t, client, "admin's")
	edited.SetManagedFields([]metav1.ManagedFieldsEntry{managed("helm", since.Add(time.Hour), false), managed("kubectl-edit", since.Add(time.Hour), true)})
	if err := client.Tracker().Update(cmGVR, edited, "ns"); err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, edited)
	if res, err := e.Sync(ctx, "k"); err != nil || len(res.Unverified) != 1 || valueOrEmpty(t, client) != "admin's" {
		t.Fatalf("Sync after an admin's edit = %+v, %v, value %q; want still unverified, the edit kept", res, err, valueOrEmpty(t, client))
	}
	// The owner applies the declaration.
	e.onEvent(cmGVR, drift(t, client, "declared"))
	if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Unverified) != 0 {
		t.Fatalf("Sync after the owner's apply = %+v, %v; want in line", res, err)
	}
	// Anyone's change is now drift.
	e.onEvent(cmGVR, drift(t, client, "old"))
	res, err := e.Sync(ctx, "k")
	if err != nil || !res.InLine || valueOrEmpty(t, client) != "declared" {
		t.Errorf("Sync after drift = %+v, %v, value %q; want reverted", res, err, valueOrEmpty(t, client))
	}
}

func ptr[T any](v T) *T { return &v }

func valueOrEmpty(t *testing.T, client *dynamicfake.FakeDynamicClient) string {
	t.Helper()
	got, err := client.Resource(cmGVR).Namespace("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(got.Object, "data", "key")
	return v
}

// TestUnverifiedObjectIsHeldAtItsFallback: while an object of an
// unverified declaration is not verified, it is held at the last verified
// declaration: an admin's edit is reverted to that, a deletion recreates
// it, Prevent judges against it, and the object stays unverified.
func TestUnverifiedObjectIsHeldAtItsFallback(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	dryRuns := 0
	client.PrependReactor("patch", "configmaps", dryRunReactor(client, false, &dryRuns))
	live := configMap(t, "verified")
	live.SetNamespace("ns")
	live.SetManagedFields([]metav1.ManagedFieldsEntry{managed("helm", since.Add(-time.Hour), true)})
	if err := client.Tracker().Create(cmGVR, live, "ns"); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{
		Objects: []*unstructured.Unstructured{configMap(t, "forged")}, DefaultNamespace: "ns", Prevent: true,
		Verify: &Verification{Owners: []string{"helm"}, Since: since,
			Fallback: func(*unstructured.Unstructured) *unstructured.Unstructured { return configMap(t, "verified") }},
	})
	sync := func(what string) Result {
		t.Helper()
		res, err := e.Sync(ctx, "k")
		if err != nil {
			t.Fatalf("Sync after %s: %v", what, err)
		}
		if len(res.Unverified) != 1 || res.InLine {
			t.Errorf("Sync after %s = %+v; want the object still unverified", what, res)
		}
		return res
	}
	sync("the forged declaration")
	if v := valueOrEmpty(t, client); v != "verified" {
		t.Fatalf("data.key = %q after the forged declaration; want the verified value kept", v)
	}

	edited := drift(t, client, "admin's")
	e.onEvent(cmGVR, edited)
	if res := sync("an admin's edit"); len(res.Drifts) != 1 || !res.Drifts[0].Corrected {
		t.Errorf("drifts %+v; want the edit corrected", res.Drifts)
	}
	if v := valueOrEmpty(t, client); v != "verified" {
		t.Errorf("data.key = %q after an admin's edit; want it reverted to the verified value", v)
	}

	j, err := e.Judge(cmGVR, edited, drift(t, client, "again"))
	if err != nil || !j.Denied() || len(j.Fields) != 1 || j.Fields[0].Declared != "verified" {
		t.Errorf("Judge of an edit = %+v, %v; want it denied, holding the verified value", j, err)
	}

	if err := client.Resource(cmGVR).Namespace("ns").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.onEvent(cmGVR, edited)
	sync("a deletion")
	if v := valueOrEmpty(t, client); v != "verified" {
		t.Errorf("data.key = %q after a deletion; want it recreated with the verified value", v)
	}
}

package engine

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// TestStandbyCorrectsWithoutDryRun: a replica standing by whose caches
// showed its objects in line corrects an edit made before it leads with
// the write alone; one whose caches did not, or that was not told it
// stands by, dry-runs the correction first, as a first check does.
func TestStandbyCorrectsWithoutDryRun(t *testing.T) {
	tests := []struct {
		name        string
		standby     bool
		sawInLine   bool
		wantDryRuns int
	}{
		{name: "standing by, saw it in line", standby: true, sawInLine: true, wantDryRuns: 0},
		{name: "standing by, never saw it", standby: true, sawInLine: false, wantDryRuns: 1},
		{name: "not standing by", standby: false, sawInLine: true, wantDryRuns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngine(t)
			live := configMap(t, "declared")
			live.SetNamespace("ns")
			live, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, live, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
			var cached any
			if tt.sawInLine {
				cached = e.store(cmGVR, live)
				if _, ok := cached.(*inLineStub); !ok {
					t.Fatalf("the live object is cached as %T, want it in line", cached)
				}
			}
			e.cached = func(schema.GroupVersionResource, string, string) (any, bool, bool, error) {
				return cached, cached != nil, true, nil
			}
			if tt.standby {
				e.Standby("k")
			}
			// Edited while no replica led.
			edited := live.DeepCopy()
			edited.Object["data"] = map[string]any{"key": "edited"}
			if edited, err = client.Resource(cmGVR).Namespace("ns").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			cached = edited
			client.ClearActions()
			if _, err := e.Sync(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			dryRuns, writes := 0, 0
			for _, a := range client.Actions() {
				if p, ok := a.(clienttesting.PatchActionImpl); ok {
					if len(p.PatchOptions.DryRun) > 0 {
						dryRuns++
					} else {
						writes++
					}
				}
			}
			if dryRuns != tt.wantDryRuns || writes != 1 {
				t.Errorf("the correction took %d dry runs and %d writes, want %d and 1", dryRuns, writes, tt.wantDryRuns)
			}
			got, err := client.Resource(cmGVR).Namespace("ns").Get(ctx, "c", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, _, _ := unstructured.NestedString(got.Object, "data", "key"); v != "declared" {
				t.Errorf("data.key = %q after the sync, want it reverted to %q", v, "declared")
			}
		})
	}
}

package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// TestReadAhead: a set whose objects its synced caches do not hold (it
// was declared after its informers listed) reads them with one list per
// type and namespace, not a GET each; what the list lacks is created. A
// page that does not settle an object leaves it to a GET, and a type and
// namespace with few objects missing is read one by one.
func TestReadAhead(t *testing.T) {
	cm := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": "ns"}, "data": map[string]any{"key": value}}}
	}
	tests := []struct {
		name     string
		declared int // ConfigMaps the set declares
		existing int // of them, those that exist
		others   int // ConfigMaps no set holds, in the same namespace
		want     map[string]int
	}{
		{"all exist", 6, 6, 0, map[string]int{"list": 1}},
		{"two to create", 6, 4, 0, map[string]int{"list": 1, "create": 2}},
		{"few missing", 3, 3, 0, map[string]int{"get": 3}},
		// 6 objects allow a page of 64; the namespace holds 100 more,
		// which come first by name, so the page holds none of the set's.
		{"a crowded namespace", 6, 6, 100, map[string]int{"list": 1, "get": 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngine(t)
			e.cached = func(schema.GroupVersionResource, string, string) (any, bool, bool, error) {
				return nil, false, true, nil
			}
			var declared []*unstructured.Unstructured
			for i := range tt.declared {
				obj := cm(fmt.Sprintf("z-%d", i), "declared")
				declared = append(declared, obj)
				if i < tt.existing {
					if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, obj.DeepCopy(), metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range tt.others {
				if _, err := client.Resource(cmGVR).Namespace("ns").Create(ctx, cm(fmt.Sprintf("a-%03d", i), "other"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			client.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				// The fake ignores Limit: page as the API server does.
				limit := a.(clienttesting.ListActionImpl).ListOptions.Limit
				all, err := client.Tracker().List(cmGVR, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "ns")
				if err != nil {
					return true, nil, err
				}
				list := all.(*unstructured.UnstructuredList)
				slices.SortFunc(list.Items, func(a, b unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
				if limit > 0 && int64(len(list.Items)) > limit {
					list.Items = list.Items[:limit]
					list.SetContinue("more")
				}
				return true, list, nil
			})
			client.ClearActions()
			e.Declare("k", ObjectSet{Objects: declared, DefaultNamespace: "ns"})
			res, err := e.Sync(ctx, "k")
			if err != nil || !res.InLine {
				t.Fatalf("Sync = %+v, %v; want in line", res, err)
			}
			got := map[string]int{}
			for _, a := range client.Actions() {
				got[a.GetVerb()]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("requests %v, want %v", got, tt.want)
			}
		})
	}
}

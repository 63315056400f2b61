package render

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
)

// pagedConfigMaps is a namespace of ConfigMaps listed as the API server
// lists them: a page of at most Limit items, and a continue token while
// more are left.
type pagedConfigMaps struct {
	dynamic.ResourceInterface
	items []unstructured.Unstructured
	// limits are the Limit of each list request.
	limits []int64
}

func (p *pagedConfigMaps) List(_ context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	p.limits = append(p.limits, opts.Limit)
	from := 0
	if opts.Continue != "" {
		from, _ = strconv.Atoi(opts.Continue)
	}
	to := min(len(p.items), from+int(opts.Limit))
	if opts.Limit == 0 {
		to = len(p.items)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMapList", "metadata": map[string]any{"resourceVersion": "7"}}}
	list.Items = append(list.Items, p.items[from:to]...)
	if to < len(p.items) {
		list.SetContinue(strconv.Itoa(to))
		left := int64(len(p.items) - to)
		list.SetRemainingItemCount(&left)
	}
	return list, nil
}

// configMapsOf are n ConfigMaps in apps whose data holds size bytes.
func configMapsOf(n, size int) []unstructured.Unstructured {
	out := make([]unstructured.Unstructured, n)
	for i := range out {
		out[i] = unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": "apps"},
			"data":     map[string]any{"blob": strings.Repeat("x", size)},
		}}
	}
	return out
}

// TestListBounded: a list lookup reads in pages, the first small and the
// later ones sized by what is left, and returns them as one list; past
// ListLookupBytes it is cut off, saying how far it got.
func TestListBounded(t *testing.T) {
	tests := []struct {
		name       string
		items      []unstructured.Unstructured
		wantItems  int
		wantLimits []int64
		wantCutOff bool
	}{
		{name: "empty", wantLimits: []int64{20}},
		{name: "one page", items: configMapsOf(20, 100), wantItems: 20, wantLimits: []int64{20}},
		{name: "small items, pages of 500", items: configMapsOf(1200, 100), wantItems: 1200, wantLimits: []int64{20, 500, 500, 500}},
		{name: "large items, pages sized by the bytes left", items: configMapsOf(40, 512<<10), wantCutOff: true, wantItems: 20, wantLimits: []int64{20}},
		{name: "medium items, cut off", items: configMapsOf(200, 64<<10), wantCutOff: true, wantItems: 128, wantLimits: []int64{20, 108}},
		{name: "just under the cap", items: configMapsOf(100, 80<<10), wantItems: 100, wantLimits: []int64{20, 83}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &pagedConfigMaps{items: tt.items}
			list, err := listBounded(context.Background(), res)
			if diff := cmp.Diff(tt.wantLimits, res.limits); diff != "" {
				t.Errorf("page limits (-want +got):\n%s", diff)
			}
			var cut *ListCutOffError
			if tt.wantCutOff {
				if !errors.As(err, &cut) || cut.Items != tt.wantItems || cut.Bytes <= ListLookupBytes {
					t.Fatalf("listBounded = %v, want cut off after %d items", err, tt.wantItems)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != tt.wantItems || list.GetContinue() != "" || list.GetRemainingItemCount() != nil || list.GetResourceVersion() != "7" {
				t.Errorf("list of %d items, continue %q, remaining %v, resourceVersion %q: want %d items, one whole list at the first page's resourceVersion",
					len(list.Items), list.GetContinue(), list.GetRemainingItemCount(), list.GetResourceVersion(), tt.wantItems)
			}
			for i, item := range list.Items {
				if item.GetName() != fmt.Sprintf("cm-%d", i) {
					t.Fatalf("item %d is %s: pages out of order", i, item.GetName())
				}
			}
		})
	}
}

// TestJSONSize holds jsonSize to encoding/json for what objects hold.
func TestJSONSize(t *testing.T) {
	for _, v := range []any{
		nil, true, false, "", "abc", int64(0), int64(-1234567), 0.5, 1e21,
		[]any{}, []any{int64(1), "a", nil}, map[string]any{},
		map[string]any{"a": map[string]any{"b": []any{true, 2.25}}, "c": "d"},
	} {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonSize(v); got != len(raw) {
			t.Errorf("jsonSize(%s) = %d, want %d", raw, got, len(raw))
		}
	}
}

// TestRenderCutsOffListLookups: a chart that lists a namespace holding
// more than ListLookupBytes fails to render, with an error that names the
// lookup and says it was cut off; one that holds less renders every item.
func TestRenderCutsOffListLookups(t *testing.T) {
	ch := chartOf(map[string]string{"count.yaml": `
{{- $cms := lookup "v1" "ConfigMap" "apps" "" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: count
data:
  configMaps: {{ len $cms.items | quote }}
`}, nil)
	objects := func(n, size int) []runtime.Object {
		var out []runtime.Object
		for _, cm := range configMapsOf(n, size) {
			out = append(out, &cm)
		}
		return out
	}
	for _, h := range helms {
		t.Run(h.String(), func(t *testing.T) {
			c, _ := fakeCluster(objects(100, 1<<10)...)
			out, err := Render(context.Background(), as(t, h, releaseOf(ch, nil, 1)), c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.Manifest, `configMaps: "100"`) {
				t.Errorf("manifest %s, want 100 ConfigMaps counted", out.Manifest)
			}

			c, _ = fakeCluster(objects(150, 64<<10)...)
			_, err = Render(context.Background(), as(t, h, releaseOf(ch, nil, 1)), c)
			var le *LookupError
			var cut *ListCutOffError
			if !errors.As(err, &le) || !errors.As(err, &cut) {
				t.Fatalf("Render error %v, want a *LookupError for a list cut off", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "lookup of ConfigMaps in apps: cut off after") {
				t.Errorf("error %q, want it to name the lookup and say it was cut off", msg)
			}
		})
	}
}

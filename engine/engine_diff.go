package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
)

// patchMetaFor returns the strategic-merge metadata (merge keys and patch
// strategies) of a built-in kind, from client-go's Go types. It returns nil
// for kinds client-go does not know, such as custom resources, which are
// patched with JSON merge patches: lists are atomic there.
func patchMetaFor(gvk schema.GroupVersionKind) strategicpatch.LookupPatchMeta {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil
	}
	meta, err := strategicpatch.NewPatchMetaFromStruct(obj)
	if err != nil {
		return nil
	}
	return meta
}

// normalize turns a manifest object into the form the API server stores, so
// that comparing it with a live object does not report differences the
// server itself made: status is dropped (it is not written through the main
// resource), nulls are dropped (they mean "absent"), and a Secret's
// stringData is folded into data, as the API server does.
func normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: dropNulls(obj.Object).(map[string]any)}
	delete(out.Object, "status")
	if out.GetAPIVersion() == "v1" && out.GetKind() == "Secret" {
		if sd, ok := out.Object["stringData"].(map[string]any); ok {
			data, _ := out.Object["data"].(map[string]any)
			if data == nil {
				data = map[string]any{}
			}
			for k, v := range sd {
				if s, ok := v.(string); ok {
					data[k] = base64.StdEncoding.EncodeToString([]byte(s))
				}
			}
			out.Object["data"] = data
			delete(out.Object, "stringData")
		}
	}
	return out
}

// dropNulls returns a deep copy of v without null map values.
func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = dropNulls(e)
		}
		return out
	default:
		return v
	}
}

// Desired returns the live object as it must be: every field the declared
// object sets holds the declared value, entries that are not declared are
// removed from lists the declared object sets, and everything else the live
// object has (fields the server defaulted, labels other actors added,
// metadata) stays as it is.
//
// This is the result a three-way merge with original = modified = declared
// and current = live aims for, with one difference that matters: a plain
// strategic three-way merge keeps list entries that drift added beside the
// declared ones (a Service edited from port 80 to 81 would end up with both
// ports), because it only deletes what the original had and the modified
// lacks. Here the declared list is treated as owned whole.
//
// meta is the strategic-merge metadata of the kind, or nil for kinds patched
// with JSON merge patches.
func Desired(live, declared map[string]any, meta strategicpatch.LookupPatchMeta) map[string]any {
	return mergeMap(live, declared, meta)
}

func mergeMap(live, declared map[string]any, meta strategicpatch.LookupPatchMeta) map[string]any {
	out := make(map[string]any, len(live)+len(declared))
	for k, v := range live {
		out[k] = v
	}
	for k, dv := range declared {
		switch dv := dv.(type) {
		case map[string]any:
			var sub strategicpatch.LookupPatchMeta
			if meta != nil {
				if m, _, err := meta.LookupPatchMetadataForStruct(k); err == nil {
					sub = m
				}
			}
			if lv, ok := live[k].(map[string]any); ok {
				out[k] = mergeMap(lv, dv, sub)
			} else {
				out[k] = dv
			}
		case []any:
			lv, _ := live[k].([]any)
			out[k] = mergeList(lv, dv, meta, k)
		default:
			out[k] = dv
		}
	}
	return out
}

// mergeList merges the live and declared values of the list at key of a
// struct described by meta.
func mergeList(live, declared []any, meta strategicpatch.LookupPatchMeta, key string) []any {
	var sub strategicpatch.LookupPatchMeta
	mergeKey := ""
	if meta != nil {
		if m, pm, err := meta.LookupPatchMetadataForSlice(key); err == nil {
			sub = m
			for _, s := range pm.GetPatchStrategies() {
				if s == "merge" {
					mergeKey = pm.GetPatchMergeKey()
				}
			}
		}
	}
	if mergeKey != "" && allHaveKey(declared, mergeKey) {
		// A keyed list: each declared entry keeps what the server
		// defaulted in the live entry with the same key; live entries
		// with other keys are drift, and go.
		out := make([]any, len(declared))
		for i, d := range declared {
			dm := d.(map[string]any)
			out[i] = dm
			for _, l := range live {
				if lm, ok := l.(map[string]any); ok && reflect.DeepEqual(lm[mergeKey], dm[mergeKey]) {
					out[i] = mergeMap(lm, dm, sub)
					break
				}
			}
		}
		return out
	}
	// An atomic list (or a list of scalars). If it still has the declared
	// length, entries are matched by position so server defaults inside
	// them survive; otherwise the declared list replaces it whole and the
	// server defaults it again.
	if len(live) != len(declared) {
		return declared
	}
	out := make([]any, len(declared))
	for i, d := range declared {
		dm, dok := d.(map[string]any)
		lm, lok := live[i].(map[string]any)
		if dok && lok {
			out[i] = mergeMap(lm, dm, sub)
		} else {
			out[i] = d
		}
	}
	return out
}

func allHaveKey(list []any, key string) bool {
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m[key]; !ok {
			return false
		}
	}
	return true
}

// Patch is a request body that moves a live object to its desired state.
type Patch struct {
	Type types.PatchType
	Data []byte
}

// ComputePatch returns the patch that turns live into desired: a strategic
// merge patch for built-in kinds (meta non-nil), a JSON merge patch for the
// rest. It returns nil if live already is desired, so that no request is
// sent for nothing.
func ComputePatch(live, desired map[string]any, meta strategicpatch.LookupPatchMeta) (*Patch, error) {
	if reflect.DeepEqual(live, desired) {
		return nil, nil
	}
	liveJSON, err := json.Marshal(live)
	if err != nil {
		return nil, err
	}
	desiredJSON, err := json.Marshal(desired)
	if err != nil {
		return nil, err
	}
	if meta != nil {
		data, err := strategicpatch.CreateTwoWayMergePatchUsingLookupPatchMeta(liveJSON, desiredJSON, meta)
		if err != nil {
			return nil, fmt.Errorf("computing strategic merge patch: %w", err)
		}
		return &Patch{Type: types.StrategicMergePatchType, Data: data}, nil
	}
	data, err := jsonpatch.CreateMergePatch(liveJSON, desiredJSON)
	if err != nil {
		return nil, fmt.Errorf("computing JSON merge patch: %w", err)
	}
	return &Patch{Type: types.MergePatchType, Data: data}, nil
}

package engine

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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

package engine

import (
	"bytes"
	"encoding/base64"
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// normalize turns a manifest object into the form the API server stores, so
// that comparing it with a live object does not report differences the
// server itself made: status is dropped (it is not written through the main
// resource), nulls are dropped (they mean "absent"), a Secret's stringData
// is folded into data, and a built-in kind's values take the form its API
// types give them (see storedForm, and stringForm, which does the same
// for ConfigMaps and Secrets without the round trip).
func normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: dropNulls(obj.Object).(map[string]any)}
	delete(out.Object, "status")
	if !stringForm(out.Object) {
		if stored, ok := storedForm(out); ok {
			out.Object = stored
		}
	}
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

// storedForm returns a built-in object's declared fields as the API server
// stores them, by the API types' round trip: quantities in canonical form
// (cpu "0.5" is "500m", memory "1024Mi" is "1Gi"), empty optional maps,
// lists and strings left out (nodeSelector: {}, env: [], clusterIP: ""),
// base64 data re-encoded without line breaks. A manifest value in another
// form would otherwise never equal the stored one, and each event on the
// object would send a correction the API server turns into nothing.
//
// Only fields the declaration has are taken from the round trip; fields
// the Go types do not know (newer than client-go) are kept as declared. It
// reports false for kinds client-go does not know, and for objects its
// types cannot hold.
func storedForm(obj *unstructured.Unstructured) (map[string]any, bool) {
	gvk := obj.GroupVersionKind()
	if !scheme.Scheme.Recognizes(gvk) {
		return nil, false
	}
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, false
	}
	// Encoded into a pooled buffer: obj.MarshalJSON grows one of its own
	// for every object a cold lock resolves.
	buf := buffers.Get().(*bytes.Buffer)
	defer buffers.Put(buf)
	buf.Reset()
	if json.NewEncoder(buf).Encode(obj.Object) != nil || json.Unmarshal(buf.Bytes(), typed) != nil {
		return nil, false
	}
	rt, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return nil, false
	}
	return storedFields(obj.Object, rt).(map[string]any), true
}

// storedFields is declared with each value taken from the round trip rt:
// declared fields the round trip dropped are kept if they hold something
// (a field the Go types do not know) and left out if empty (an empty
// optional field the API server does not store), and fields the round trip
// added (zero values of required fields) are not taken.
func storedFields(declared, rt any) any {
	switch d := declared.(type) {
	case map[string]any:
		r, ok := rt.(map[string]any)
		if !ok {
			return declared
		}
		out := make(map[string]any, len(d))
		for k, dv := range d {
			rv, ok := r[k]
			switch {
			case ok && rv != nil:
				out[k] = storedFields(dv, rv)
			case !isZero(dv):
				out[k] = dv
			}
		}
		return out
	case []any:
		r, ok := rt.([]any)
		if !ok || len(r) != len(d) {
			return declared
		}
		out := make([]any, len(d))
		for i := range d {
			out[i] = storedFields(d[i], r[i])
		}
		return out
	default:
		// A scalar: the round trip's form. Integers the converter
		// writes as int64, as decoded JSON objects have them.
		return rt
	}
}

// isZero reports whether v is a value an omitempty field leaves out.
func isZero(v any) bool {
	switch v := v.(type) {
	case bool:
		return !v
	case int64:
		return v == 0
	case float64:
		return v == 0
	}
	return isEmpty(v)
}

package manifest

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// decodeObject decodes a YAML document that holds one object with an
// apiVersion and a kind, straight into the values
// unstructured.UnmarshalJSON would give for sigs.k8s.io/yaml's JSON of it:
// maps with string keys, int64 for numbers JSON writes without a point,
// float64 for the rest, strings with each invalid UTF-8 byte made U+FFFD.
// The way through JSON was a third of a manifest's parse time and a
// quarter of its allocation (BenchmarkParseRelease), on every release at
// startup. It reports false for anything else (no object, a List, an
// object validate refuses, a value JSON cannot hold, a type it does not
// know), which the way through JSON then decodes, or names.
func decodeObject(doc []byte) (*unstructured.Unstructured, bool) {
	var y any
	if yaml.Unmarshal(doc, &y) != nil {
		return nil, false
	}
	v, ok := jsonValue(y)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	obj := &unstructured.Unstructured{Object: m}
	if isList(obj) || validate(obj) != nil {
		return nil, false
	}
	return obj, true
}

// jsonValue converts what yaml.Unmarshal gives into what the JSON of it
// decodes to (see decodeObject).
func jsonValue(y any) (any, bool) {
	switch y := y.(type) {
	case nil, bool:
		return y, true
	case string:
		return validUTF8(y), true
	case int:
		return int64(y), true
	case int64:
		return y, true
	case uint64:
		if y <= math.MaxInt64 {
			return int64(y), true
		}
		return float64(y), true
	case float64:
		return jsonFloat(y)
	case []any:
		out := make([]any, len(y))
		for i, e := range y {
			var ok bool
			if out[i], ok = jsonValue(e); !ok {
				return nil, false
			}
		}
		return out, true
	case map[any]any:
		out := make(map[string]any, len(y))
		for k, e := range y {
			key, ok := jsonKey(k)
			if _, twice := out[key]; !ok || twice {
				// Two keys with one JSON name (2 and 2.0): which
				// one JSON keeps depends on map order.
				return nil, false
			}
			if out[key], ok = jsonValue(e); !ok {
				return nil, false
			}
		}
		return out, true
	}
	return nil, false
}

// jsonFloat is f as encoding/json writes it and a decoder that keeps
// integers reads it back: a float without a fraction, written without a
// point or an exponent, comes back an int64 when it fits one. JSON cannot
// hold NaN or an infinity.
func jsonFloat(f float64) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, false
	}
	abs := math.Abs(f)
	if (abs != 0 && (abs < 1e-6 || abs >= 1e21)) || f != math.Trunc(f) {
		return f, true // written with an exponent or a point
	}
	if abs < 1<<53 {
		return int64(f), true // written as the integer it is
	}
	// Written with the fewest digits that read back as f, then zeros:
	// not always the integer f is, nor one that fits an int64.
	var buf [32]byte
	if i, err := strconv.ParseInt(string(strconv.AppendFloat(buf[:0], f, 'f', -1, 64)), 10, 64); err == nil {
		return i, true
	}
	return f, true
}

// jsonKey turns a YAML map key into a JSON one, as sigs.k8s.io/yaml does.
func jsonKey(k any) (string, bool) {
	switch k := k.(type) {
	case string:
		return validUTF8(k), true
	case int:
		return strconv.Itoa(k), true
	case int64:
		return strconv.FormatInt(k, 10), true
	case float64:
		switch s := strconv.FormatFloat(k, 'g', -1, 32); s {
		case "+Inf":
			return ".inf", true
		case "-Inf":
			return "-.inf", true
		case "NaN":
			return ".nan", true
		default:
			return s, true
		}
	case bool:
		return strconv.FormatBool(k), true
	}
	return "", false
}

// validUTF8 is s as a JSON round trip leaves it: each byte that is not
// part of valid UTF-8 becomes U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

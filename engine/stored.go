package engine

import (
	"encoding/base64"
	"slices"
	"unicode/utf8"
)

// ConfigMaps and Secrets are most of what charts declare, by count, and for
// them the API types' round trip (storedForm) changes little: it drops
// empty optional fields and writes a Secret's data in base64 without line
// breaks. At 25,000 locked objects the round trip was a quarter of what the
// cold lock allocated, and a tenth of its CPU with the collection of it.
// stringForm does the same to such an object in place, and leaves anything
// else to the round trip.

// stringFields are the fields of a ConfigMap or Secret stringForm knows,
// with what each holds and whether the API types leave it out when empty.
var stringFields = map[string]map[string]fieldForm{
	"ConfigMap": {"data": stringMapField, "immutable": boolField},
	"Secret":    {"data": base64MapField, "stringData": stringMapField, "type": optionalString, "immutable": boolField},
}

// metadataFields are the fields of an object's metadata stringForm knows:
// those charts write.
var metadataFields = map[string]fieldForm{
	"name": optionalString, "namespace": optionalString, "generateName": optionalString,
	"labels": stringMapField, "annotations": stringMapField,
}

// fieldForm is what a field holds, as the API types declare it.
type fieldForm int

const (
	// optionalString is a string, left out when empty.
	optionalString fieldForm = iota
	// stringMapField is a map of strings, left out when empty; an empty
	// value is kept.
	stringMapField
	// base64MapField is a map of base64 strings ([]byte in the API
	// types), left out when empty.
	base64MapField
	// boolField is a *bool: false is kept, as true is.
	boolField
)

// stringForm turns a v1 ConfigMap or Secret, without nulls, into the form
// storedForm gives it, in place, and reports whether it could: false, and
// obj untouched, for any other kind, any field stringForm does not know,
// any value of another type than the API types', and base64 that does not
// decode. TestStringFormIsStoredForm holds it to storedForm's output.
func stringForm(obj map[string]any) bool {
	if obj["apiVersion"] != "v1" {
		return false
	}
	kind, _ := obj["kind"].(string)
	fields, ok := stringFields[kind]
	if !ok {
		return false
	}
	meta, ok := obj["metadata"].(map[string]any)
	// Checked whole before any change: a value that does not decode
	// leaves the object as declared, as storedForm would.
	if !ok || !knownForms(meta, metadataFields) || !knownForms(obj, fields, "apiVersion", "kind", "metadata") {
		return false
	}
	if data, ok := obj["data"].(map[string]any); ok && kind == "Secret" {
		for k, v := range data {
			if canonical, changed := reencode(v.(string)); changed {
				data[k] = canonical
			}
		}
	}
	dropEmpty(meta, metadataFields)
	dropEmpty(obj, fields)
	return true
}

// knownForms reports whether every key of m but others is one of fields',
// and holds what its form says.
func knownForms(m map[string]any, fields map[string]fieldForm, others ...string) bool {
	for k, v := range m {
		if slices.Contains(others, k) {
			continue
		}
		form, ok := fields[k]
		if !ok || !formHolds(form, v) {
			return false
		}
	}
	return true
}

// formHolds reports whether v is what form says, valid UTF-8 (which the
// round trip's JSON would replace), and for base64, decodes.
func formHolds(form fieldForm, v any) bool {
	switch form {
	case optionalString:
		s, ok := v.(string)
		return ok && utf8.ValidString(s)
	case boolField:
		_, ok := v.(bool)
		return ok
	}
	values, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for key, e := range values {
		s, ok := e.(string)
		if !ok || !utf8.ValidString(key) || !utf8.ValidString(s) {
			return false
		}
		if form == base64MapField {
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				return false
			}
		}
	}
	return true
}

// reencode is s, which decodes, in the base64 the API server stores: the
// standard encoding, padded, without the line breaks a decoder skips.
func reencode(s string) (string, bool) {
	b, _ := base64.StdEncoding.DecodeString(s)
	canonical := base64.StdEncoding.EncodeToString(b)
	return canonical, canonical != s
}

// dropEmpty deletes the fields of m the API types leave out when empty.
func dropEmpty(m map[string]any, fields map[string]fieldForm) {
	for k, form := range fields {
		if v, ok := m[k]; ok && form != boolField && isEmpty(v) {
			delete(m, k)
		}
	}
}

package informers

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestSkipValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -1: does not end in the input
	}{
		{`"abc"`, 5},
		{`"a\"b"x`, 6},
		{`"a\\"x`, 5},
		{`"a\\\"b"`, 8},
		{`"\\\\"`, 6},
		{`"unterminated`, -1},
		{`"ends in an escaped quote\"`, -1},
		{`{}`, 2},
		{`{"a":{"b":[1,2,{"c":"}"}]}} tail`, 27},
		{`{"a":"{[\"]}"}`, 14},
		{`[1, [2, [3]]]`, 13},
		{`{"a":{"b":1}`, -1},
		{`123,`, 3},
		{`true}`, 4},
		{`null `, 4},
		{`123`, -1}, // a number at the end of the input may go on
		{`}`, -1},
		{`,`, -1},
		{``, -1},
	} {
		if got := skipValue([]byte(tc.in), 0); got != tc.want {
			t.Errorf("skipValue(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want objectHead
		ok   bool
	}{{
		name: "a ConfigMap",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"42","labels":{"name":"not this"}},"data":{"name":"nor this"}}`,
		want: objectHead{apiVersion: []byte("v1"), kind: []byte("ConfigMap"), namespace: []byte("ns"), name: []byte("a"), resourceVersion: []byte("42")},
		ok:   true,
	}, {
		name: "metadata first, spaces around",
		in:   ` { "metadata" : { "resourceVersion" : "7" , "name" : "b" } , "kind" : "Secret" , "apiVersion" : "v1" } `,
		want: objectHead{apiVersion: []byte("v1"), kind: []byte("Secret"), name: []byte("b"), resourceVersion: []byte("7")},
		ok:   true,
	}, {
		name: "a bookmark has no name",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}`,
		want: objectHead{apiVersion: []byte("v1"), kind: []byte("ConfigMap"), resourceVersion: []byte("9")},
		ok:   true,
	}, {
		name: "a Status",
		in:   `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":410}`,
		want: objectHead{apiVersion: []byte("v1"), kind: []byte("Status")},
		ok:   true,
	}, {
		name: "an escaped name is left to the full decoder",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a\u0062"}}`,
		ok:   false,
	}, {
		name: "a name that is not a string",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":1}}`,
		ok:   false,
	}, {
		name: "metadata that is not an object",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":"x"}`,
		ok:   false,
	}, {
		name: "not an object",
		in:   `["kind","ConfigMap"]`,
		ok:   false,
	}, {
		name: "cut short",
		in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"`,
		ok:   false,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := readHead([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && !sameHead(got, tc.want) {
				t.Errorf("readHead = %s, want %s", headString(got), headString(tc.want))
			}
		})
	}
}

func sameHead(a, b objectHead) bool { return headString(a) == headString(b) }

func headString(h objectHead) string {
	return string(h.apiVersion) + "|" + string(h.kind) + "|" + string(h.namespace) + "|" + string(h.name) + "|" + string(h.resourceVersion)
}

// FuzzReadHead holds the scanner to encoding/json: on any valid JSON
// object, what readHead reads (when it reads anything) is what
// encoding/json decodes.
func FuzzReadHead(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"42"},"data":{"k":"v\"}"}}`,
		`{"metadata":{"name":"a\\","annotations":{"x":"{"}},"kind":"K"}`,
		`{"apiVersion":"v1","kind":"Status","code":410,"details":[1,2.5e3,true,null]}`,
		`{"a":[{"b":"]"}],"metadata":{"namespace":"n"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A map, not a struct: encoding/json matches struct fields without
		// regard to case, and the API server does not.
		var want map[string]any
		// encoding/json replaces invalid UTF-8, which the API server never
		// writes.
		if !utf8.Valid(data) || !json.Valid(data) || json.Unmarshal(data, &want) != nil {
			return
		}
		got, ok := readHead(data)
		if !ok {
			return
		}
		str := func(v any) string { s, _ := v.(string); return s }
		field := func(m any, key string) string {
			obj, _ := m.(map[string]any)
			return str(obj[key])
		}
		wantHead := objectHead{
			apiVersion:      []byte(str(want["apiVersion"])),
			kind:            []byte(str(want["kind"])),
			namespace:       []byte(field(want["metadata"], "namespace")),
			name:            []byte(field(want["metadata"], "name")),
			resourceVersion: []byte(field(want["metadata"], "resourceVersion")),
		}
		// On duplicate keys readHead reads the first and encoding/json
		// keeps the last; the API server never writes them.
		if hasDuplicateKeys(data) {
			return
		}
		if !sameHead(got, wantHead) {
			t.Errorf("readHead(%s) = %s, encoding/json says %s", data, headString(got), headString(wantHead))
		}
	})
}

// hasDuplicateKeys reports whether any object in data repeats a key.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				key, _ := k.(string)
				if seen[key] || walk() {
					return true
				}
				seen[key] = true
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if walk() {
					return true
				}
			}
			_, _ = dec.Token()
		}
		return false
	}
	return walk()
}

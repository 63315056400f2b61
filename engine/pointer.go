package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Pointer is a parsed RFC 6901 JSON pointer.
type Pointer []string

// ParsePointer parses an RFC 6901 JSON pointer such as /spec/replicas or
// /metadata/annotations/example.com~1hash. The empty pointer (the whole
// document) is refused: ignoring a whole object is the opt-out annotation's
// job.
func ParsePointer(s string) (Pointer, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("JSON pointer %q must start with /", s)
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return nil, fmt.Errorf("JSON pointer %q: ~ must be followed by 0 or 1", s)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// String formats p as RFC 6901 text.
func (p Pointer) String() string {
	var b strings.Builder
	for _, seg := range p {
		b.WriteByte('/')
		// A key segment is written as the entry's keys, which index
		// reads back.
		seg = strings.TrimPrefix(seg, keySegment)
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(seg, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// keySegment starts a segment that selects a list entry by its keys rather
// than its index (see mergeRules.keyed); the rest is the keys as JSON.
// Written out (see Pointer.String), a key segment is the JSON alone, as in
// /spec/ports/{"port":53,"protocol":"TCP"}: no index starts with "{".
const keySegment = "\x00"

// keyedSegment returns the key segment that selects entry by the values it
// has of keys, or false if it has none of them.
func keyedSegment(entry map[string]any, keys []string) (string, bool) {
	values := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := entry[k]; ok {
			values[k] = v
		}
	}
	if len(values) == 0 {
		return "", false
	}
	data, err := json.Marshal(values)
	if err != nil {
		return "", false
	}
	return keySegment + string(data), true
}

// index returns the position in list of the entry seg selects: by index,
// or by keys for a key segment or a JSON object.
func index(list []any, seg string) int {
	keys, ok := strings.CutPrefix(seg, keySegment)
	if !ok && strings.HasPrefix(seg, "{") {
		keys, ok = seg, true
	}
	if ok {
		var want map[string]any
		if json.Unmarshal([]byte(keys), &want) != nil {
			return -1
		}
		for i, e := range list {
			if m, ok := e.(map[string]any); ok && hasKeys(m, want) {
				return i
			}
		}
		return -1
	}
	i, err := strconv.Atoi(seg)
	if err != nil || i < 0 || i >= len(list) {
		return -1
	}
	return i
}

func hasKeys(entry, keys map[string]any) bool {
	for k, v := range keys {
		if !scalarEqual(entry[k], v) {
			return false
		}
	}
	return true
}

// get returns the value at p in doc.
func (p Pointer) get(doc any) (any, bool) {
	cur := doc
	for _, seg := range p {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i := index(c, seg)
			if i < 0 {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// set puts v at p in doc, whose parent of p must exist; with present false
// it removes what is at p instead (a list element is not removed, since
// that would shift the ones after it: it is left as it is).
func (p Pointer) set(doc any, v any, present bool) {
	if len(p) == 0 {
		return
	}
	parent, ok := p[:len(p)-1].get(doc)
	if !ok {
		return
	}
	last := p[len(p)-1]
	switch c := parent.(type) {
	case map[string]any:
		if present {
			c[last] = v
		} else {
			delete(c, last)
		}
	case []any:
		if i := index(c, last); i >= 0 && present {
			c[i] = v
		}
	}
}

// keepLive makes desired carry live's value (or absence) at each ignored
// pointer, so that ignored fields are neither compared nor reverted.
func keepLive(desired, live map[string]any, ignored []Pointer) {
	for _, p := range ignored {
		v, ok := p.get(live)
		if ok {
			v = runtime.DeepCopyJSONValue(v)
		}
		p.set(desired, v, ok)
	}
}

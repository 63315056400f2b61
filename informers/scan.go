package informers

import (
	"bytes"
	"hash/maphash"
)

// A small JSON scanner for watch streams. It finds where values end and
// reads a few string fields without decoding anything else: most objects a
// Registry watches are untracked, and all it needs of them is a name, a
// namespace and a resourceVersion. It trusts its input to be the API
// server's JSON: it never reads out of bounds on any input, but on input
// that is not JSON its answers are only as good as the input.

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string whose opening quote is
// at data[i], or -1 if the string does not end in data.
func skipString(data []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(data[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		// A quote is escaped when an odd number of backslashes precede it.
		k := i - 1
		for data[k] == '\\' {
			k--
		}
		i++
		if (i-2-k)%2 == 0 {
			return i
		}
	}
}

// skipValue returns the index just past the value that starts at data[i],
// or -1 if it does not end in data.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = skipString(data, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	}
	// A number, true, false or null: it ends where a delimiter starts. At
	// the end of data it may still go on.
	for j := i; j < len(data); j++ {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
	}
	return -1
}

// eachField calls fn with the key and the raw value of each field of the
// object at data[i], until fn returns false. It returns the index just past
// the object (or where fn stopped), or -1 if data does not hold an object
// there. Keys are passed as they are written, escapes and all.
func eachField(data []byte, i int, fn func(key, value []byte) bool) int {
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != '{' {
		return -1
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return -1
		}
		end := skipString(data, i)
		if end < 0 {
			return -1
		}
		key := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return -1
		}
		start := skipSpace(data, i+1)
		end = skipValue(data, start)
		if end < 0 {
			return -1
		}
		if !fn(key, data[start:end]) {
			return end
		}
		i = skipSpace(data, end)
		if i >= len(data) {
			return -1
		}
		switch data[i] {
		case '}':
			return i + 1
		case ',':
			i = skipSpace(data, i+1)
		default:
			return -1
		}
	}
}

// plainString returns the contents of a JSON string value that has no
// escapes; ok is false for anything else.
func plainString(value []byte) (s []byte, ok bool) {
	if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
		return nil, false
	}
	s = value[1 : len(value)-1]
	return s, bytes.IndexByte(s, '\\') < 0
}

// objectHead is what a watch decoder needs of an object before it decides
// whether to decode it.
type objectHead struct {
	apiVersion, kind                 []byte
	namespace, name, resourceVersion []byte
}

// readHead reads an object's apiVersion, kind and identifying metadata,
// and stops once it has them. ok is false if the object is not one it can
// read that way: not an object, or one of those fields is not a plain
// string. Absent fields are empty.
func readHead(data []byte) (h objectHead, ok bool) {
	ok = true
	found := 0
	str := func(dst *[]byte, value []byte) {
		if *dst, ok = plainString(value); !ok {
			*dst = nil
		}
	}
	end := eachField(data, 0, func(key, value []byte) bool {
		switch string(key) {
		case "apiVersion":
			str(&h.apiVersion, value)
			found++
		case "kind":
			str(&h.kind, value)
			found++
		case "metadata":
			found++
			if eachField(value, 0, func(key, value []byte) bool {
				switch string(key) {
				case "name":
					str(&h.name, value)
				case "namespace":
					str(&h.namespace, value)
				case "resourceVersion":
					str(&h.resourceVersion, value)
				}
				return ok
			}) < 0 {
				ok = false
			}
		}
		return ok && found < 3
	})
	return h, ok && end >= 0
}

// fingerprintSeed seeds every fingerprint of this process: fingerprints are
// compared only within it.
var fingerprintSeed = maphash.MakeSeed()

// heldFingerprint hashes what a lock may hold of an object: all of it but
// its status and the metadata the API server rewrites on every write
// (resourceVersion, managedFields), and, when held is not nil, all labels
// and annotations but the ones it names. Two versions of an object with
// the same fingerprint differ at most there, as when another controller
// writes the status. The keys held are hashed too, so fingerprints taken
// with different HeldMetadata never match. It returns 0, which no caller
// trusts, for data it cannot read.
func heldFingerprint(data []byte, held *HeldMetadata) uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	ok := true
	if eachField(data, 0, func(key, value []byte) bool {
		switch string(key) {
		case "status":
			return true
		case "metadata":
			h.Write(key)
			ok = eachField(value, 0, func(key, value []byte) bool {
				switch string(key) {
				case "resourceVersion", "managedFields":
				case "labels":
					ok = hashHeld(&h, key, value, held, held.labelKeys())
				case "annotations":
					ok = hashHeld(&h, key, value, held, held.annotationKeys())
				default:
					h.Write(key)
					h.Write(value)
				}
				return ok
			}) >= 0 && ok
			return ok
		}
		h.Write(key)
		h.Write(value)
		return true
	}) < 0 || !ok {
		return 0
	}
	return max(h.Sum64(), 1)
}

// hashHeld writes the labels or annotations in value to h: all of them
// when held is nil, else the keys held names, with the names themselves.
// It returns false for a value it cannot read.
func hashHeld(h *maphash.Hash, field, value []byte, held *HeldMetadata, keys string) bool {
	h.Write(field)
	if held == nil {
		h.Write(value)
		return true
	}
	h.WriteString(keys)
	h.WriteByte(0)
	if string(value) == "null" {
		return true
	}
	ok := true
	return eachField(value, 0, func(key, value []byte) bool {
		// A key written with escapes is not one HeldMetadata can
		// name: the object is taken as changed.
		if ok = bytes.IndexByte(key, '\\') < 0; ok && holds(keys, key) {
			h.Write(key)
			h.WriteByte(0)
			h.Write(value)
			h.WriteByte(0)
		}
		return ok
	}) >= 0 && ok
}

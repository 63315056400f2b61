package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// A declaration is kept as a tree of tagged values rather than as JSON: a
// cold lock packs every declaration once and reads each back at least once,
// and JSON's reflection, escapes and number parsing were most of that
// (BenchmarkPackDeclaration, BenchmarkDeclaration). The tree reads back as
// the JSON of the same object would: a float JSON writes as an integer
// reads back as an int64, a string that is not UTF-8 has each bad byte
// replaced, and a value of any other Go type reads back as its JSON.

// The tags of the values of a tree.
const (
	tagNull byte = iota
	tagFalse
	tagTrue
	// tagInt is followed by a zigzag varint.
	tagInt
	// tagFloat is followed by the float's 8 bytes, little-endian.
	tagFloat
	// tagString is followed by a length and the string's bytes.
	tagString
	// tagList is followed by a length and the items.
	tagList
	// tagMap is followed by a length, and each key (a length and its
	// bytes) and value in turn, the keys sorted: equal objects make equal
	// trees, so that equal declarations have equal digests.
	tagMap
)

// maxTreeDepth bounds the nesting a tree is written and read with, as
// encoding/json bounds what it reads: no declaration comes close.
const maxTreeDepth = 10000

// errTree is returned for bytes that are not a tree.
var errTree = errors.New("not a packed declaration")

// appendTree appends v, a value of an unstructured object, to b as a tree.
func appendTree(b []byte, v any) ([]byte, error) {
	return appendValue(b, v, 0)
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxTreeDepth {
		return nil, fmt.Errorf("nested more than %d deep", maxTreeDepth)
	}
	switch v := v.(type) {
	case nil:
		return append(b, tagNull), nil
	case bool:
		if v {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt), v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("unsupported value: %v", v)
		}
		if i, ok := jsonInteger(v); ok {
			return binary.AppendVarint(append(b, tagInt), i), nil
		}
		return binary.LittleEndian.AppendUint64(append(b, tagFloat), math.Float64bits(v)), nil
	case string:
		return appendString(append(b, tagString), v), nil
	case []any:
		b = binary.AppendUvarint(append(b, tagList), uint64(len(v)))
		for _, e := range v {
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		b = binary.AppendUvarint(append(b, tagMap), uint64(len(v)))
		var room [16]string
		keys := room[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendString(b, k)
			var err error
			if b, err = appendValue(b, v[k], depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	// Another Go type, which a library's caller may have put in an
	// object: as JSON would have it.
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var decoded any
	if err := utiljson.Unmarshal(data, &decoded); err != nil {
		return nil, err
	}
	return appendValue(b, decoded, depth)
}

// appendString appends s's length and bytes, each byte that is not UTF-8
// replaced by U+FFFD as JSON's encoder does.
func appendString(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(binary.AppendUvarint(b, uint64(len(s))), s...)
	}
	valid := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			valid = utf8.AppendRune(valid, utf8.RuneError)
		} else {
			valid = append(valid, s[i:i+size]...)
		}
		i += size
	}
	return append(binary.AppendUvarint(b, uint64(len(valid))), valid...)
}

// jsonInteger reports whether JSON writes f as an integer that reads back
// as an int64, and which: f has no fraction, and is written without an
// exponent (below 1e21) and small enough for an int64 once written (JSON
// writes the fewest digits that read back as f, then zeros). It is the
// rule of manifest's jsonFloat: the engine, a library, imports none of the
// module's internal packages where one copy could live.
func jsonInteger(f float64) (int64, bool) {
	abs := math.Abs(f)
	if (abs != 0 && (abs < 1e-6 || abs >= 1e21)) || f != math.Trunc(f) {
		return 0, false
	}
	if abs < 1<<53 {
		return int64(f), true
	}
	var buf [32]byte
	i, err := strconv.ParseInt(string(strconv.AppendFloat(buf[:0], f, 'f', -1, 64)), 10, 64)
	return i, err == nil
}

// readTree reads the tree b holds, which must be all of b. Its strings are
// substrings of one copy of b: a declaration read back is short-lived, and
// one allocation serves all its strings.
func readTree(b []byte) (any, error) {
	r := treeReader{b: b, s: string(b)}
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	if r.i != len(b) {
		return nil, errTree
	}
	return v, nil
}

// treeReader reads a tree from b, at i; s is b as a string.
type treeReader struct {
	b []byte
	s string
	i int
}

func (r *treeReader) value(depth int) (any, error) {
	if depth > maxTreeDepth || r.i >= len(r.b) {
		return nil, errTree
	}
	tag := r.b[r.i]
	r.i++
	switch tag {
	case tagNull:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt:
		v, n := binary.Varint(r.b[r.i:])
		if n <= 0 {
			return nil, errTree
		}
		r.i += n
		return v, nil
	case tagFloat:
		if len(r.b)-r.i < 8 {
			return nil, errTree
		}
		v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:]))
		r.i += 8
		return v, nil
	case tagString:
		return r.string()
	case tagList:
		n, err := r.length()
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for j := range out {
			if out[j], err = r.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case tagMap:
		n, err := r.length()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		for range n {
			k, err := r.string()
			if err != nil {
				return nil, err
			}
			if out[k], err = r.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errTree
}

// length reads a count of items, each at least a byte: a count the bytes
// left cannot hold is not a tree, and allocates nothing.
func (r *treeReader) length() (int, error) {
	n, size := binary.Uvarint(r.b[r.i:])
	if size <= 0 || n > uint64(len(r.b)-r.i-size) {
		return 0, errTree
	}
	r.i += size
	return int(n), nil
}

func (r *treeReader) string() (string, error) {
	n, err := r.length()
	if err != nil {
		return "", err
	}
	s := r.s[r.i : r.i+n]
	r.i += n
	return s, nil
}

package informers

import (
	"slices"
	"strings"
)

// HeldMetadata names the labels and annotations a caller holds of one
// object. Another controller adding its own label or annotation to a
// locked object is, after status writes, the commonest event a lock need
// not look at: with HeldMetadata, a change to any other key is skipped
// like a status write (see Options.HeldMetadata). It is comparable, so
// callers can intern it: the objects of one chart share a handful.
type HeldMetadata struct {
	// labels and annotations are the sorted keys, each followed by a NUL.
	labels, annotations string
}

// NewHeldMetadata returns the HeldMetadata of these label and annotation
// keys, in any order.
func NewHeldMetadata(labels, annotations []string) HeldMetadata {
	return HeldMetadata{labels: joinKeys(labels), annotations: joinKeys(annotations)}
}

func joinKeys(keys []string) string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range slices.Compact(keys) {
		b.WriteString(k)
		b.WriteByte(0)
	}
	return b.String()
}

// holds reports whether keys, as HeldMetadata joins them, has key.
// Label and annotation keys are short qualified names, and an object has
// few: a scan is quicker than any set.
func holds(keys string, key []byte) bool {
	for keys != "" {
		k, rest, _ := strings.Cut(keys, "\x00")
		if k == string(key) {
			return true
		}
		keys = rest
	}
	return false
}

func (m *HeldMetadata) labelKeys() string {
	if m == nil {
		return ""
	}
	return m.labels
}

func (m *HeldMetadata) annotationKeys() string {
	if m == nil {
		return ""
	}
	return m.annotations
}

package engine

import (
	"bytes"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdvalue "sigs.k8s.io/structured-merge-diff/v6/value"
)

// Manager is a field manager that changed a locked object: the answer to
// "who did this?", read from metadata.managedFields.
type Manager struct {
	Name      string
	Operation string
	// Time is when the manager last wrote; zero if the server did not say.
	Time time.Time
}

// maxDriftPaths bounds the paths reported for one drift: enough to say what
// changed, not a copy of an object someone replaced wholesale.
const maxDriftPaths = 16

// driftPaths lists, as JSON pointers, where live differs from desired.
// Lists of different lengths are reported as the list itself.
func driftPaths(live, desired map[string]any) []string {
	var out []string
	diffPaths(nil, live, desired, &out, maxDriftPaths)
	return out
}

// diffPaths appends to out the pointers under at where a and b differ, up
// to max of them (all of them if max < 0).
func diffPaths(at Pointer, a, b any, out *[]string, max int) {
	full := func() bool { return max >= 0 && len(*out) >= max }
	if full() {
		return
	}
	add := func(p Pointer) {
		if !full() {
			*out = append(*out, p.String())
		}
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			add(at)
			return
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			x, inA := av[k]
			y, inB := bv[k]
			p := append(slices.Clip(at), k)
			if inA != inB {
				add(p)
				continue
			}
			diffPaths(p, x, y, out, max)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			add(at)
			return
		}
		for i := range av {
			diffPaths(append(slices.Clip(at), strconv.Itoa(i)), av[i], bv[i], out, max)
		}
	default:
		if !scalarEqual(a, b) {
			add(at)
		}
	}
}

// scalarEqual compares JSON scalars, taking 1 and 1.0 as equal: decoders
// differ in which they produce.
func scalarEqual(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// attribute names the field managers of live that own the drifted paths,
// other than own (the engine itself). A path no one owns, such as a field
// someone removed, is put down to the most recent writer other than own.
func attribute(live *unstructured.Unstructured, paths []string, own string) []Manager {
	entries := live.GetManagedFields()
	var out []Manager
	addEntry := func(e metav1.ManagedFieldsEntry) {
		m := Manager{Name: e.Manager, Operation: string(e.Operation)}
		if e.Time != nil {
			m.Time = e.Time.Time
		}
		for _, o := range out {
			if o.Name == m.Name && o.Operation == m.Operation {
				return
			}
		}
		out = append(out, m)
	}
	unowned := false
	sets := make([]*fieldpath.Set, len(entries))
	for i, e := range entries {
		if e.Manager == own || e.FieldsV1 == nil {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err == nil {
			sets[i] = s
		}
	}
	for _, text := range paths {
		p, err := ParsePointer(text)
		if err != nil {
			// driftPaths made it; the whole object drifted.
			p = nil
		}
		found := false
		for i, s := range sets {
			if s != nil && owns(s, live.Object, p) {
				addEntry(entries[i])
				found = true
			}
		}
		if !found {
			unowned = true
		}
	}
	if unowned {
		var latest *metav1.ManagedFieldsEntry
		for i, e := range entries {
			if e.Manager == own || e.Time == nil {
				continue
			}
			if latest == nil || latest.Time.Before(e.Time) {
				latest = &entries[i]
			}
		}
		if latest != nil {
			addEntry(*latest)
		}
	}
	return out
}

// owns reports whether set, a managedFields entry's field set, holds the
// field at p in doc or anything under it, or an atomic value around it. List elements are matched the
// way managedFields names them: by key fields, by value or by index.
func owns(set *fieldpath.Set, doc any, p Pointer) bool {
	if len(p) == 0 {
		return false
	}
	cur, v := set, doc
	for _, seg := range p {
		var pe fieldpath.PathElement
		switch c := v.(type) {
		case map[string]any:
			name := seg
			pe = fieldpath.PathElement{FieldName: &name}
			v = c[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return false
			}
			var ok bool
			if pe, ok = elementOf(cur, c[i], i); !ok {
				return false
			}
			v = c[i]
		default:
			return false
		}
		next, hasChildren := cur.Children.Get(pe)
		if cur.Members.Has(pe) && !hasChildren {
			// A leaf: the whole value is owned, as an atomic list
			// or map is.
			return true
		}
		// A member with children too is a map or list the entry
		// created ("." in FieldsV1): that owns the container, not
		// what another manager put in it since.
		if !hasChildren {
			return false
		}
		cur = next
	}
	return true
}

// elementOf finds the path element in set that names list element elem at
// index i.
func elementOf(set *fieldpath.Set, elem any, i int) (fieldpath.PathElement, bool) {
	var found fieldpath.PathElement
	ok := false
	match := func(pe fieldpath.PathElement) {
		if ok {
			return
		}
		switch {
		case pe.Index != nil:
			ok = *pe.Index == i
		case pe.Value != nil:
			ok = smdvalue.Equals(*pe.Value, smdvalue.NewValueInterface(elem))
		case pe.Key != nil:
			m, isMap := elem.(map[string]any)
			if !isMap {
				return
			}
			ok = true
			for _, f := range *pe.Key {
				if !smdvalue.Equals(f.Value, smdvalue.NewValueInterface(m[f.Name])) {
					ok = false
				}
			}
		}
		if ok {
			found = pe
		}
	}
	set.Members.Iterate(match)
	set.Children.Iterate(match)
	return found, ok
}

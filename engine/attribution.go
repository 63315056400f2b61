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
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
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

// driftPaths lists, as JSON pointers, where live differs from desired. An
// entry of a list k's schema keys (containers, env, Service ports) is named
// by its keys, as in /spec/ports/{"port":53,"protocol":"TCP"}/targetPort:
// entries are matched by their keys, as the merge matches them, so another
// actor's reordering or insertion does not make unchanged entries' key
// fields look changed, and one entry's change is not put down to the owner
// of another at its position. A keyed entry only one side has is named
// whole; other lists of different lengths are named themselves.
func (k kindSchema) driftPaths(live, desired map[string]any) []string {
	d := pathDiff{max: maxDriftPaths, schema: k.schema}
	d.walk(nil, k.root, live, desired)
	return d.out
}

// storedKeys names the keyed list entries of paths by all the keys their
// entry has in stored, the object as the API server stored it: a declared
// entry that leaves a key to its default ({"port":80}, protocol unsaid) is
// then named as the entry that replaced it is ({"port":81,"protocol":"TCP"}).
// A path stored has no entry of stays as it is.
func (k kindSchema) storedKeys(paths []string, stored map[string]any) []string {
	if k.schema == nil {
		return paths
	}
	for i, text := range paths {
		if p, err := ParsePointer(text); err == nil {
			paths[i] = keyedPointer(k.schema, k.root, stored, p).String()
		}
	}
	return paths
}

// kindSchema is the schema of one kind under some rules, for walking its
// objects' fields; its schema is nil when the rules know none.
type kindSchema struct {
	schema *smdschema.Schema
	root   smdschema.TypeRef
}

// kindOf returns the schema of obj's kind, read from an object that has
// nothing but its kind: converting the whole object would cost more than
// the walks it serves.
func (r mergeRules) kindOf(obj map[string]any) kindSchema {
	tv, err := r.typed(map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"]})
	if err != nil {
		return kindSchema{}
	}
	return kindSchema{schema: tv.Schema(), root: tv.TypeRef()}
}

// atomic reports whether a value of type tr is held whole: an atomic list
// or map. Without a schema, lists are and maps are not, as deducedTypes
// has them.
func (k kindSchema) atomic(tr smdschema.TypeRef, v any) bool {
	if k.schema != nil {
		if atom, ok := k.schema.Resolve(tr); ok {
			switch {
			case atom.List != nil:
				return atom.List.ElementRelationship == smdschema.Atomic
			case atom.Map != nil:
				return atom.Map.ElementRelationship == smdschema.Atomic
			}
		}
	}
	_, isList := v.([]any)
	return isList
}

// field is the type of field name of a value of type tr.
func (k kindSchema) field(tr smdschema.TypeRef, name string) smdschema.TypeRef {
	if k.schema != nil {
		if atom, ok := k.schema.Resolve(tr); ok && atom.Map != nil {
			return fieldType(atom.Map, name)
		}
	}
	return smdschema.TypeRef{}
}

// element is the type of the elements of a list of type tr.
func (k kindSchema) element(tr smdschema.TypeRef) smdschema.TypeRef {
	if k.schema != nil {
		if atom, ok := k.schema.Resolve(tr); ok && atom.List != nil {
			return atom.List.ElementType
		}
	}
	return smdschema.TypeRef{}
}

// diffPaths appends to out the pointers under at where a and b differ, up
// to max of them (all of them if max < 0), comparing lists by position.
func diffPaths(at Pointer, a, b any, out *[]string, max int) {
	d := pathDiff{max: max, out: *out}
	d.walk(at, smdschema.TypeRef{}, a, b)
	*out = d.out
}

// pathDiff collects the pointers where two documents differ.
type pathDiff struct {
	// schema tells keyed lists from others; nil compares every list by
	// position.
	schema *smdschema.Schema
	max    int // the most pointers collected; all if < 0
	out    []string
}

func (d *pathDiff) full() bool { return d.max >= 0 && len(d.out) >= d.max }

func (d *pathDiff) add(p Pointer) {
	if !d.full() {
		d.out = append(d.out, p.String())
	}
}

// walk compares a and b, the values at at, of schema type tr.
func (d *pathDiff) walk(at Pointer, tr smdschema.TypeRef, a, b any) {
	if d.full() {
		return
	}
	var atom smdschema.Atom
	if d.schema != nil {
		atom, _ = d.schema.Resolve(tr)
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			d.add(at)
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
				d.add(p)
				continue
			}
			var field smdschema.TypeRef
			if atom.Map != nil {
				field = fieldType(atom.Map, k)
			}
			d.walk(p, field, x, y)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			d.add(at)
			return
		}
		var elem smdschema.TypeRef
		if l := atom.List; l != nil {
			elem = l.ElementType
			if l.ElementRelationship == smdschema.Associative && len(l.Keys) > 0 && d.entries(at, l, av, bv) {
				return
			}
		}
		if len(av) != len(bv) {
			d.add(at)
			return
		}
		for i := range av {
			d.walk(append(slices.Clip(at), strconv.Itoa(i)), elem, av[i], bv[i])
		}
	default:
		if !scalarEqual(a, b) {
			d.add(at)
		}
	}
}

// entries compares the entries of a keyed list, a and b, matched by their
// keys whatever their order. An entry only one side has is named whole; a
// list whose entries differ in order alone is named itself. It compares
// nothing, and reports false, if an entry has none of the keys.
func (d *pathDiff) entries(at Pointer, l *smdschema.List, a, b []any) bool {
	aKeys, ok := entryKeys(a, l.Keys)
	if !ok {
		return false
	}
	bKeys, ok := entryKeys(b, l.Keys)
	if !ok {
		return false
	}
	before := len(d.out)
	matched := make([]bool, len(a))
	last, reordered := -1, false
	for j, key := range bKeys {
		i := -1
		for n, k := range aKeys {
			if k == key && !matched[n] {
				i = n
				break
			}
		}
		p := append(slices.Clip(at), key)
		if i < 0 {
			d.add(p)
			continue
		}
		matched[i] = true
		reordered = reordered || i < last
		last = i
		d.walk(p, l.ElementType, a[i], b[j])
	}
	for i, key := range aKeys {
		if !matched[i] {
			d.add(append(slices.Clip(at), key))
		}
	}
	if reordered && len(d.out) == before {
		d.add(at)
	}
	return true
}

// entryKeys returns a key segment (see keySegment) for each entry of list:
// the values it has of keys.
func entryKeys(list []any, keys []string) ([]string, bool) {
	out := make([]string, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		if out[i], ok = keyedSegment(m, keys); !ok {
			return nil, false
		}
	}
	return out, true
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
func attribute(live *unstructured.Unstructured, k kindSchema, paths []string, own string) []Manager {
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
			if s != nil && owns(s, k, live.Object, p) {
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
// field at p in doc or anything under it, or an atomic value around it. A
// list element, which p names by its index or its keys (see index), is
// matched the way managedFields names it: by key fields, by value or by
// index. A granular map or list that set holds as a value but not its
// fields ("." in FieldsV1, or all that is left of an entry once another
// manager changed the fields in it) is the container alone: it does not
// own what is in it.
func owns(set *fieldpath.Set, k kindSchema, doc any, p Pointer) bool {
	if len(p) == 0 {
		return false
	}
	cur, v, tr := set, doc, k.root
	for n, seg := range p {
		var pe fieldpath.PathElement
		switch c := v.(type) {
		case map[string]any:
			name := seg
			pe = fieldpath.PathElement{FieldName: &name}
			v, tr = c[seg], k.field(tr, seg)
		case []any:
			i := index(c, seg)
			if i < 0 {
				return false
			}
			var ok bool
			if pe, ok = elementOf(cur, c[i], i); !ok {
				return false
			}
			v, tr = c[i], k.element(tr)
		default:
			return false
		}
		next, hasChildren := cur.Children.Get(pe)
		if cur.Members.Has(pe) && !hasChildren {
			// A leaf: the drifted field itself, or a value held
			// whole around it.
			return n == len(p)-1 || k.atomic(tr, v)
		}
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

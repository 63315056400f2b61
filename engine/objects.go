package engine

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// lockedObjects are a set's resolved objects, sorted by ref. A set's
// objects are looked up by ref once an event, and added or removed only
// when it is declared; a map of them cost about 120 bytes an object (its
// 80-byte key, again, in half-empty groups), a sorted slice costs 8.
type lockedObjects []*lockedObject

// compareRefs orders ObjectRefs by type, then namespace, then name.
func compareRefs(a, b ObjectRef) int {
	return cmp.Or(
		strings.Compare(a.GVR.Group, b.GVR.Group),
		strings.Compare(a.GVR.Version, b.GVR.Version),
		strings.Compare(a.GVR.Resource, b.GVR.Resource),
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Name, b.Name),
	)
}

func (l lockedObjects) search(ref ObjectRef) (int, bool) {
	return slices.BinarySearchFunc(l, ref, func(o *lockedObject, ref ObjectRef) int { return compareRefs(o.ref(), ref) })
}

// get returns the object ref names, or nil.
func (l lockedObjects) get(ref ObjectRef) *lockedObject {
	if i, ok := l.search(ref); ok {
		return l[i]
	}
	return nil
}

// add adds o unless an object of its ref is there already, and reports
// whether it did.
func (l *lockedObjects) add(o *lockedObject) bool {
	i, found := l.search(o.ref())
	if found {
		return false
	}
	*l = slices.Insert(*l, i, o)
	return true
}

// owners are the keys of the sets that declare each object, the one that
// holds it first (see Engine.holderLocked). Almost every object has one
// owner, kept as a string in first; the few with more keep the others in
// rest. One slice for each would cost an allocation an object. The maps
// are keyed by ownerKey, half an ObjectRef's size.
type owners struct {
	first map[ownerKey]string
	rest  map[ownerKey][]string
	// types numbers the resource types of the keys.
	types map[schema.GroupVersionResource]uint32
}

// ownerKey is an ObjectRef with its type numbered (see owners.types).
type ownerKey struct {
	namespace, name string
	gvr             uint32
}

func newOwners() owners {
	return owners{first: map[ownerKey]string{}, rest: map[ownerKey][]string{}, types: map[schema.GroupVersionResource]uint32{}}
}

// key returns ref's ownerKey; ok is false for a type no set declared,
// unless add numbers it.
func (o owners) key(ref ObjectRef, add bool) (k ownerKey, ok bool) {
	n, ok := o.types[ref.GVR]
	if !ok && add {
		n, ok = uint32(len(o.types)), true
		o.types[ref.GVR] = n
	}
	return ownerKey{namespace: ref.Namespace, name: ref.Name, gvr: n}, ok
}

// holder returns the key of the set that holds ref, or "".
func (o owners) holder(ref ObjectRef) string {
	k, ok := o.key(ref, false)
	if !ok {
		return ""
	}
	return o.first[k]
}

// has reports whether any set declares ref.
func (o owners) has(ref ObjectRef) bool {
	k, ok := o.key(ref, false)
	if !ok {
		return false
	}
	_, ok = o.first[k]
	return ok
}

// keys returns ref's owners, first the holder; the caller may change the
// slice.
func (o owners) keys(ref ObjectRef) []string {
	k, ok := o.key(ref, false)
	if !ok {
		return nil
	}
	first, ok := o.first[k]
	if !ok {
		return nil
	}
	return append([]string{first}, o.rest[k]...)
}

// set makes keys ref's owners, in that order.
func (o owners) set(ref ObjectRef, keys []string) {
	k, ok := o.key(ref, len(keys) > 0)
	if !ok {
		return // no set declares an object of its type
	}
	switch len(keys) {
	case 0:
		delete(o.first, k)
		delete(o.rest, k)
	case 1:
		o.first[k] = keys[0]
		delete(o.rest, k)
	default:
		o.first[k] = keys[0]
		o.rest[k] = slices.Clone(keys[1:])
	}
}

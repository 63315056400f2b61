package engine

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"
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

// owners say which sets declare each object, in the order they hold it
// (see Engine.holderLocked). Almost every object has one owner, the set
// whose lockedObject is kept in first; the keys of the others, for the
// few objects of several, are kept in rest.
//
// first is keyed by a hash of the object's ref, and a lookup checks the
// ref of the object it finds. A map keyed by the ref (its namespace, name
// and a number for its type, 40 bytes) and holding the holder's key (16
// more) cost 82 bytes a locked object in half-empty groups, the most of
// any index the engine keeps; keyed by a hash and holding a pointer, an
// entry is 16 bytes. Two refs of one hash are all but impossible (less
// than one chance in 10^9 at 100,000 objects, and the seed is chosen at
// random, so a tenant cannot aim for it), and are still kept apart: the
// second is kept in collided, by its ref.
type owners struct {
	seed     maphash.Seed
	first    map[uint64]*lockedObject
	collided map[ObjectRef]*lockedObject
	rest     map[ObjectRef][]string
	// hash is hashRef but in tests of collided.
	hash func(maphash.Seed, ObjectRef) uint64
}

func newOwners() owners {
	return owners{seed: maphash.MakeSeed(), first: map[uint64]*lockedObject{}, collided: map[ObjectRef]*lockedObject{}, rest: map[ObjectRef][]string{}, hash: hashRef}
}

// hashRef hashes ref's fields, each ended by a byte no name holds.
func hashRef(seed maphash.Seed, ref ObjectRef) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, s := range [...]string{ref.GVR.Group, ref.GVR.Version, ref.GVR.Resource, ref.Namespace, ref.Name} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// holder returns the object of the set that holds ref, or nil.
func (o owners) holder(ref ObjectRef) *lockedObject {
	if obj := o.first[o.hash(o.seed, ref)]; obj != nil && obj.is(ref) {
		return obj
	}
	return o.collided[ref]
}

// has reports whether any set declares ref.
func (o owners) has(ref ObjectRef) bool {
	return o.holder(ref) != nil
}

// keys returns the keys of ref's owners, first the holder's; the caller
// may change the slice.
func (o owners) keys(ref ObjectRef) []string {
	obj := o.holder(ref)
	if obj == nil {
		return nil
	}
	return append([]string{obj.set.key}, o.rest[ref]...)
}

// set makes holder, of a set that declares ref, ref's holder and the keys
// in rest its other owners, in that order; a nil holder leaves ref with
// none.
func (o owners) set(ref ObjectRef, holder *lockedObject, rest []string) {
	// A ref is kept in first, at its hash, or in collided, never both.
	h := o.hash(o.seed, ref)
	in := o.first[h]
	mine := in != nil && in.is(ref)
	switch {
	case holder == nil && mine:
		delete(o.first, h)
	case holder == nil:
		delete(o.collided, ref)
	case mine || in == nil:
		o.first[h] = holder
		delete(o.collided, ref)
	default:
		o.collided[ref] = holder
	}
	if holder == nil || len(rest) == 0 {
		delete(o.rest, ref)
		return
	}
	o.rest[ref] = slices.Clone(rest)
}

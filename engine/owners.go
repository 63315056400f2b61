package engine

import (
	"slices"
)

// disownLocked takes key out of the owners of s's objects, and returns
// the objects key held that another set declares too.
func (e *Engine) disownLocked(key string, s *objectSet) []ObjectRef {
	var released []ObjectRef
	for _, o := range s.objects {
		ref := o.ref()
		keys := e.owners.keys(ref)
		if len(keys) > 1 && keys[0] == key {
			released = append(released, ref)
		}
		e.setOwnersLocked(ref, slices.DeleteFunc(keys, func(k string) bool { return k == key }))
	}
	return released
}

// setOwnersLocked makes the sets of keys ref's owners, in that order.
// Each key is of a set in e.sets that declares ref.
func (e *Engine) setOwnersLocked(ref ObjectRef, keys []string) {
	for len(keys) > 0 {
		if s := e.sets[keys[0]]; s != nil {
			if obj := s.objects.get(ref); obj != nil {
				e.owners.set(ref, obj, keys[1:])
				return
			}
		}
		keys = keys[1:] // not reached: a set declares what it owns
	}
	e.owners.set(ref, nil, nil)
}

// holderLocked returns the key of the set that holds ref, or "".
func (e *Engine) holderLocked(ref ObjectRef) string {
	if obj := e.owners.holder(ref); obj != nil {
		return obj.set.key
	}
	return ""
}

// holder returns the key of the set that holds ref, or "".
func (e *Engine) holder(ref ObjectRef) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holderLocked(ref)
}

// holdsBefore reports whether s holds an object that o declares too
// before o does: by Precedence, then since, then seq.
func (s *objectSet) holdsBefore(o *objectSet) bool {
	if s.spec.Precedence != o.spec.Precedence {
		return s.spec.Precedence > o.spec.Precedence
	}
	return s.since < o.since || (s.since == o.since && s.seq < o.seq)
}

// ownLocked adds key, whose set is s, to ref's owners in the order of
// their sets' Precedence, since and seq, and returns the key of the set it takes ref
// over from, if any.
func (e *Engine) ownLocked(key string, s *objectSet, ref ObjectRef) string {
	keys := e.owners.keys(ref)
	if slices.Contains(keys, key) {
		return ""
	}
	at := len(keys)
	for i, k := range keys {
		if o := e.sets[k]; o != nil && s.holdsBefore(o) {
			at = i
			break
		}
	}
	holder := e.holderLocked(ref)
	e.setOwnersLocked(ref, slices.Insert(keys, at, key))
	e.owned++
	s.owned = e.owned
	if at == 0 && len(keys) > 0 {
		return holder
	}
	return ""
}

// handOffLocked marks each of refs dirty in the set that holds it now, and
// returns those sets' keys: they take over what another let go.
func (e *Engine) handOffLocked(refs []ObjectRef) []string {
	var keys []string
	for _, ref := range refs {
		key := e.holderLocked(ref)
		s := e.activeLocked(key)
		if s == nil || s.objects.get(ref) == nil {
			continue
		}
		if _, ok := s.dirty[ref]; !ok {
			s.dirty[ref] = e.now().UnixNano()
		}
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys
}

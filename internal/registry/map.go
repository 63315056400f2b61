package registry

import "sync"

// Map is a map from K to V that is safe for concurrent use. Its zero value
// is empty and ready to use. It guards the map, not the values: a value
// that is a pointer is shared, and whoever changes what it points to must
// see that no one else does at the same time (the controller's states are
// changed only by the worker syncing their key, which the workqueue makes
// one at a time).
//
// It takes a RWMutex, not a sync.Map, because its keys are typed, every
// caller's access is a single short critical section, and GetOrCreate must
// create a value once, which sync.Map's LoadOrStore does only by building a
// value that may be thrown away.
type Map[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

// Get returns key's value, and whether there is one.
func (m *Map[K, V]) Get(key K) (V, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[key]
	return v, ok
}

// GetOrCreate returns key's value, first storing create's if key has none.
// create is called at most once, under the lock, so it must be quick and
// must not use m.
func (m *Map[K, V]) GetOrCreate(key K, create func() V) V {
	if v, ok := m.Get(key); ok {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Another goroutine may have created it between the two locks.
	if v, ok := m.m[key]; ok {
		return v
	}
	if m.m == nil {
		m.m = map[K]V{}
	}
	v := create()
	m.m[key] = v
	return v
}

// Set stores v as key's value, replacing any.
func (m *Map[K, V]) Set(key K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[K]V{}
	}
	m.m[key] = v
}

// Delete removes key's value and returns it, and whether there was one,
// so that a caller can let go of what the value held.
func (m *Map[K, V]) Delete(key K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	delete(m.m, key)
	return v, ok
}

// Len is how many keys have a value.
func (m *Map[K, V]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}

// Range calls f with each key and value, from a copy taken under the lock:
// f may use m, and does not see what changes while it runs.
func (m *Map[K, V]) Range(f func(key K, v V)) {
	m.mu.RLock()
	type entry struct {
		key K
		v   V
	}
	entries := make([]entry, 0, len(m.m))
	for k, v := range m.m {
		entries = append(entries, entry{k, v})
	}
	m.mu.RUnlock()
	for _, e := range entries {
		f(e.key, e.v)
	}
}

package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// mappings remembers a RESTMapper's mappings until the types change (see
// Engine.typesChanged). A discovery RESTMapper asks the mapper of every
// group in turn, most answering with an error: 7 KB of garbage a call, and
// a cold lock calls it once for every object (make bench, 400 releases of
// 50 objects: 143 MB, a fifteenth of all the cold lock allocated).
type mappings struct {
	mapper meta.ResettableRESTMapper

	mu sync.Mutex
	// gen counts resets: a mapping asked for before one is not kept.
	gen    uint64
	byKind map[schema.GroupVersionKind]*meta.RESTMapping
}

// RESTMapping returns the mapping of gk at version, as the mapper does.
// The mapping is shared: callers must not change it.
func (m *mappings) RESTMapping(gk schema.GroupKind, version string) (*meta.RESTMapping, error) {
	gvk := gk.WithVersion(version)
	m.mu.Lock()
	mapping, gen := m.byKind[gvk], m.gen
	m.mu.Unlock()
	if mapping != nil {
		return mapping, nil
	}
	mapping, err := m.mapper.RESTMapping(gk, version)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen == gen {
		if m.byKind == nil {
			m.byKind = map[schema.GroupVersionKind]*meta.RESTMapping{}
		}
		m.byKind[gvk] = mapping
	}
	return mapping, nil
}

// Reset forgets every mapping, the mapper's too. The mapper is reset
// first: a mapping it gave before is then from a generation that has
// passed, and is not kept.
func (m *mappings) Reset() {
	m.mapper.Reset()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.byKind = nil
}

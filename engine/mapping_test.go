package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the mappings asked of it, and runs during, if set,
// while it answers.
type countingMapper struct {
	meta.RESTMapper
	asked, resets int
	during        func()
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	if c.during != nil {
		c.during()
	}
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func (c *countingMapper) Reset() { c.resets++ }

func TestMappingsRemember(t *testing.T) {
	cm := schema.GroupKind{Kind: "ConfigMap"}
	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	for _, tc := range []struct {
		name string
		run  func(m *mappings, c *countingMapper)
		// asked is how often the mapper was asked.
		asked int
	}{
		{"asked once", func(m *mappings, _ *countingMapper) {
			for range 3 {
				_, _ = m.RESTMapping(cm, "v1")
			}
		}, 1},
		{"asked again after a reset", func(m *mappings, _ *countingMapper) {
			_, _ = m.RESTMapping(cm, "v1")
			m.Reset()
			_, _ = m.RESTMapping(cm, "v1")
		}, 2},
		{"an unknown kind is asked each time", func(m *mappings, _ *countingMapper) {
			for range 2 {
				if _, err := m.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
					t.Errorf("an unknown kind's mapping: %v, want a no-match error", err)
				}
			}
		}, 2},
		{"a mapping the mapper gave while it was reset is not kept", func(m *mappings, c *countingMapper) {
			c.during = func() { c.during = nil; m.Reset() }
			_, _ = m.RESTMapping(cm, "v1")
			_, _ = m.RESTMapping(cm, "v1")
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := meta.NewDefaultRESTMapper(nil)
			base.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
			c := &countingMapper{RESTMapper: base}
			m := &mappings{mapper: c}
			tc.run(m, c)
			if c.asked != tc.asked {
				t.Errorf("the mapper was asked %d times, want %d", c.asked, tc.asked)
			}
			mapping, err := m.RESTMapping(cm, "v1")
			if err != nil || mapping.Resource.Resource != "configmaps" {
				t.Errorf("mapping of ConfigMap = %+v, %v", mapping, err)
			}
		})
	}
}

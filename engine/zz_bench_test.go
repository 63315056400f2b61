package engine

import (
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func BenchmarkZZServerRules(b *testing.B) {
	data, err := os.ReadFile("/tmp/apps-v1.json")
	if err != nil {
		b.Skip(err)
	}
	docs := &servedDocs{docs: map[string]string{"apis/apps/v1": string(data)}}
	s := newSchemas(docs, time.Now)
	gv := schema.GroupVersion{Group: "apps", Version: "v1"}
	s.load(b.Context(), []schema.GroupVersion{gv})
	rules := s.rules(gv)
	if rules.types == deducedTypes || rules.types == builtinTypes() {
		b.Fatal("not server rules")
	}
	declared := obj(b, benchDeployment)
	live, err := rules.desired(obj(b, benchLive), declared)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("inline-server", func(b *testing.B) {
		for b.Loop() {
			if _, err := rules.desired(live, declared); err != nil {
				b.Fatal(err)
			}
		}
	})
	compiled := mergeRules{types: builtinTypes()}
	b.Run("inline-compiled", func(b *testing.B) {
		for b.Loop() {
			if _, err := compiled.desired(live, declared); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("driftpaths-server", func(b *testing.B) {
		for b.Loop() {
			rules.driftPaths(live, declared)
		}
	})
}

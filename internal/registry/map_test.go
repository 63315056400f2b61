package registry

import (
	"sync"
	"testing"
)

// TestMap drives a Map through the steps its callers take, one table row
// a sequence, from the zero value.
func TestMap(t *testing.T) {
	type step struct {
		op    string // get, create, set or delete
		key   string
		value int
		// want and wantOK are what get, create and delete return.
		want   int
		wantOK bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "the zero value is empty", steps: []step{
			{op: "get", key: "a"},
			{op: "delete", key: "a"},
		}},
		{name: "create stores once and returns what is stored", steps: []step{
			{op: "create", key: "a", value: 1, want: 1},
			{op: "create", key: "a", value: 2, want: 1},
			{op: "get", key: "a", want: 1, wantOK: true},
		}},
		{name: "set replaces", steps: []step{
			{op: "set", key: "a", value: 1},
			{op: "set", key: "a", value: 2},
			{op: "get", key: "a", want: 2, wantOK: true},
			{op: "create", key: "a", value: 3, want: 2},
		}},
		{name: "delete returns the value and forgets it", steps: []step{
			{op: "set", key: "a", value: 1},
			{op: "set", key: "b", value: 2},
			{op: "delete", key: "a", want: 1, wantOK: true},
			{op: "get", key: "a"},
			{op: "delete", key: "a"},
			{op: "get", key: "b", want: 2, wantOK: true},
			{op: "create", key: "a", value: 3, want: 3},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Map[string, int]
			for i, s := range tt.steps {
				got, ok := 0, false
				switch s.op {
				case "get":
					got, ok = m.Get(s.key)
				case "create":
					got, ok = m.GetOrCreate(s.key, func() int { return s.value }), s.wantOK
				case "set":
					m.Set(s.key, s.value)
					continue
				case "delete":
					got, ok = m.Delete(s.key)
				}
				if got != s.want || ok != s.wantOK {
					t.Errorf("step %d, %s %q = %d, %v; want %d, %v", i, s.op, s.key, got, ok, s.want, s.wantOK)
				}
			}
		})
	}
}

// TestGetOrCreateOnce: goroutines that ask for the same key at once share
// one value, created once.
func TestGetOrCreateOnce(t *testing.T) {
	var m Map[string, *int]
	calls := 0
	var mu sync.Mutex
	got := make([]*int, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			got[i] = m.GetOrCreate("a", func() *int {
				mu.Lock()
				calls++
				mu.Unlock()
				return new(int)
			})
		})
	}
	wg.Wait()
	if calls != 1 {
		t.Errorf("create was called %d times; want once", calls)
	}
	for i, p := range got {
		if p != got[0] {
			t.Errorf("goroutine %d got another value than goroutine 0", i)
		}
	}
}

// TestRange: Len counts the keys; Range visits every entry once, and f may change the map,
// which the visit does not see.
func TestRange(t *testing.T) {
	var m Map[string, int]
	m.Range(func(string, int) { t.Error("the zero value has entries") })
	m.Set("a", 1)
	m.Set("b", 2)
	if n := m.Len(); n != 2 {
		t.Errorf("Len = %d with two keys, want 2", n)
	}
	seen := map[string]int{}
	m.Range(func(k string, v int) {
		seen[k] += v
		m.Delete("a")
		m.Set("c", 3)
	})
	if len(seen) != 2 || seen["a"] != 1 || seen["b"] != 2 {
		t.Errorf("Range saw %v, want a=1 and b=2 once each", seen)
	}
	if _, ok := m.Get("c"); !ok {
		t.Error("a Set from within Range was lost")
	}
}

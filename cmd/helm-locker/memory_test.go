package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"
)

func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          int64
		ok            bool
	}{
		{"limited", "536870912\n", 536870912, true},
		{"unlimited", "max\n", 0, false},
		{"garbage", "lots\n", 0, false},
		{"zero", "0\n", 0, false},
		{"missing", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name)
			if tc.content != "" {
				if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := memoryLimit(file)
			if got != tc.want || ok != tc.ok {
				t.Errorf("memoryLimit of %q = %d, %v; want %d, %v", tc.content, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestTrimmer(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		// cpu is the CPU time at each poll.
		cpu []time.Duration
		// want is the polls that trim, by index.
		want []int
		// cost is the CPU time a trim itself takes.
		cost time.Duration
	}{
		{"quiet from the start: nothing to drop", []time.Duration{5 * ms, 10 * ms, 15 * ms, 20 * ms}, nil, 0},
		{"a start, then quiet", []time.Duration{600 * ms, 1200 * ms, 1205 * ms, 1210 * ms, 1215 * ms, 1220 * ms}, []int{3}, 0},
		{"one quiet poll is not quiet", []time.Duration{600 * ms, 605 * ms, 900 * ms, 905 * ms, 910 * ms}, []int{4}, 0},
		{"busy again, quiet again", []time.Duration{600 * ms, 605 * ms, 610 * ms, 1400 * ms, 1405 * ms, 1410 * ms}, []int{2, 5}, 0},
		{"a little work is not worth a trim", []time.Duration{600 * ms, 605 * ms, 610 * ms, 700 * ms, 705 * ms, 710 * ms, 715 * ms}, []int{2}, 0},
		{"little work adds up", []time.Duration{600 * ms, 605 * ms, 610 * ms, 760 * ms, 765 * ms, 770 * ms, 920 * ms, 925 * ms, 930 * ms}, []int{2, 8}, 0},
		{"a trim's own work is not worth another", append([]time.Duration{600 * ms, 605 * ms, 610 * ms}, steps(815*ms, 5*ms, 20)...), []int{2}, 200 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr trimmer
			var got []int
			for i, cpu := range tc.cpu {
				if tr.observe(cpu) {
					got = append(got, i)
					tr.after(cpu + tc.cost)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("trims at polls %v, want %v", got, tc.want)
			}
		})
	}
}

// steps is n CPU times from first, step apart.
func steps(first, step time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = first + time.Duration(i)*step
	}
	return out
}

// TestHandBackReturnsFreedHeap: what the heap freed is given back to the
// kernel at once, not over the minutes the runtime's scavenger takes.
func TestHandBackReturnsFreedHeap(t *testing.T) {
	free := func() uint64 {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	garbage := make([][]byte, 64)
	for i := range garbage {
		garbage[i] = make([]byte, 1<<20)
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	runtime.GC()
	before := free()
	if before < 32<<20 {
		t.Skipf("the runtime kept %d bytes of freed heap; nothing to hand back", before)
	}
	if _, err := handBack(); err != nil {
		t.Fatal(err)
	}
	if after := free(); after > 8<<20 {
		t.Errorf("after handBack the process keeps %d MiB of freed heap, %d MiB before; want it given back", after>>20, before>>20)
	}
}

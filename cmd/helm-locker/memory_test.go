package main

import (
	"os"
	"path/filepath"
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
	}{
		{"quiet from the start: nothing to drop", []time.Duration{5 * ms, 10 * ms, 15 * ms, 20 * ms}, nil},
		{"a start, then quiet", []time.Duration{600 * ms, 1200 * ms, 1205 * ms, 1210 * ms, 1215 * ms, 1220 * ms}, []int{3}},
		{"one quiet poll is not quiet", []time.Duration{600 * ms, 605 * ms, 900 * ms, 905 * ms, 910 * ms}, []int{4}},
		{"busy again, quiet again", []time.Duration{600 * ms, 605 * ms, 610 * ms, 1400 * ms, 1405 * ms, 1410 * ms}, []int{2, 5}},
		{"a little work is not worth a trim", []time.Duration{600 * ms, 605 * ms, 610 * ms, 700 * ms, 705 * ms, 710 * ms, 715 * ms}, []int{2}},
		{"little work adds up", []time.Duration{600 * ms, 605 * ms, 610 * ms, 760 * ms, 765 * ms, 770 * ms, 920 * ms, 925 * ms, 930 * ms}, []int{2, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr trimmer
			var got []int
			for i, cpu := range tc.cpu {
				if tr.observe(cpu) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("trims at polls %v, want %v", got, tc.want)
			}
		})
	}
}

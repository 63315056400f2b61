package main

import (
	"os"
	"path/filepath"
	"testing"
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

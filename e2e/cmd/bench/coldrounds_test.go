package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPhases(t *testing.T) {
	log := `I1126 02:09:04.684323    4909 run.go:56] "Starting helm-locker" controller="helm-locker"
I1126 02:09:04.758344    4909 elector_lead.go:23] "Leading" controller="helm-locker"
I1126 02:09:04.759338    4909 controller.go:310] "Waiting for caches to sync" controller="helm-locker"
I1126 02:09:07.759338    4909 controller.go:456] "Declared the releases" controller="helm-locker" count=400
I1126 02:09:09.259338    4909 controller.go:323] "Starting workers" controller="helm-locker" count=64
I1126 02:09:13.259338    4909 controller.go:349] "Informers synced" controller="helm-locker"
`
	file := filepath.Join(t.TempDir(), "locker.log")
	if err := os.WriteFile(file, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	// Informers synced 8.575 s after the first line; the cold lock ended
	// 11.575 s after start.
	want := "lead 0.08 s, caches and declare 3.00 s, prepare 1.50 s, list 4.00 s, sync 3.00 s"
	if got := phases(file, 11.575015); got != want {
		t.Errorf("phases = %q, want %q", got, want)
	}
	cut := log[:strings.Index(log, "I1126 02:09:07")]
	if err := os.WriteFile(file, []byte(cut), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := phases(file, 10), `the log has no "Declared the releases"`; got != want {
		t.Errorf("phases of a log cut short = %q, want %q", got, want)
	}
}

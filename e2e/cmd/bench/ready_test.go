package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// TestWaitReadyWaitsForTheLeader: a locker standing by for the Lease
// answers /readyz OK before it has read anything. The burst's CRs must
// come after the start, so waitReady waits past that answer, and past a
// leader whose caches have not synced, for one whose caches have.
func TestWaitReadyWaitsForTheLeader(t *testing.T) {
	answers := []struct {
		code int
		body string
	}{
		{http.StatusOK, "standing by for the leader Lease"},
		{http.StatusServiceUnavailable, "caches have not synced yet"},
		{http.StatusOK, "caches synced and watching"},
	}
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a := answers[min(int(asked.Add(1)), len(answers))-1]
		w.WriteHeader(a.code)
		fmt.Fprintln(w, a.body)
	}))
	defer srv.Close()
	log := filepath.Join(t.TempDir(), "locker.log")
	line := fmt.Sprintf("I1129 serve.go:26] \"Serving health probes\" controller=\"helm-locker\" address=%q\n", strings.TrimPrefix(srv.URL, "http://"))
	if err := os.WriteFile(log, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &locker{Process: &controlplane.Process{Log: log}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := asked.Load(); got != 3 {
		t.Errorf("waitReady returned after %d answers, want 3: the leader's, with its caches synced", got)
	}
}

package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/internal/metrics"
)

// TestLeaderElectionDefaults holds the default leader flags to the
// failover targets: a crashed leader replaced within 15 s (the lease
// duration, plus up to 3 s for the successor to start and revert), and
// at most 6 renewals a minute at idle.
func TestLeaderElectionDefaults(t *testing.T) {
	f := newRootCommand().Flags()
	duration := func(name string) time.Duration {
		t.Helper()
		d, err := f.GetDuration(name)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lease, deadline, retry := duration("leader-elect-lease-duration"), duration("leader-elect-renew-deadline"), duration("leader-elect-retry-period")
	if lease > 13*time.Second {
		t.Errorf("lease duration %s: a crashed leader would go unreplaced for longer than 15 s less startup", lease)
	}
	if perMinute := float64(time.Minute) / float64(retry); perMinute > 6 {
		t.Errorf("retry period %s: %.1f renewals a minute, more than 6", retry, perMinute)
	}
	if !(retry < deadline && deadline < lease) {
		t.Errorf("want retry period %s < renew deadline %s < lease duration %s", retry, deadline, lease)
	}
}

// TestProfilesAreServedOnlyWhenAsked: a heap profile shows what the
// locker holds, so it is off unless --profiling is set.
func TestProfilesAreServedOnlyWhenAsked(t *testing.T) {
	for _, tt := range []struct {
		profiling bool
		want      int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv := httptest.NewServer(metricsMux(metrics.New(nil), tt.profiling))
		resp, err := http.Get(srv.URL + "/debug/pprof/heap?gc=1")
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("profiling %v: /debug/pprof/heap answered %d, want %d", tt.profiling, resp.StatusCode, tt.want)
		}
	}
}

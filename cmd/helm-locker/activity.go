package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// activity remembers when the process last sent a request other than a
// watch, so that the leader renews its Lease early while the API server is
// loaded (see leader.Config.Busy). The Lease's own requests go around it,
// through a client of their own, or every renewal would make the next one
// early.
type activity struct {
	last atomic.Int64 // unix nanoseconds; 0 before the first request
}

// wrap counts the requests sent through rt. A watch is one long request,
// opened again every few minutes at idle: it is not counted.
func (a *activity) wrap(rt http.RoundTripper) http.RoundTripper {
	return activityRoundTripper{RoundTripper: rt, activity: a}
}

// within reports whether a request was sent in the last d.
func (a *activity) within(d time.Duration) bool {
	last := a.last.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < d
}

type activityRoundTripper struct {
	http.RoundTripper
	activity *activity
}

func (t activityRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.RawQuery, "watch=true") {
		t.activity.last.Store(time.Now().UnixNano())
	}
	return t.RoundTripper.RoundTrip(req)
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (t activityRoundTripper) WrappedRoundTripper() http.RoundTripper { return t.RoundTripper }

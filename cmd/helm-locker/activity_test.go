package main

import (
	"net/http"
	"testing"
	"time"
)

func TestActivityCountsRequestsButNotWatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		urls []string
		want bool
	}{
		{name: "nothing sent", want: false},
		{name: "a watch opened", urls: []string{"https://api/api/v1/configmaps?allowWatchBookmarks=true&resourceVersion=5&watch=true"}, want: false},
		{name: "a list", urls: []string{"https://api/api/v1/configmaps?limit=500"}, want: true},
		{name: "a patch after a watch", urls: []string{"https://api/api/v1/configmaps?watch=true", "https://api/api/v1/namespaces/a/configmaps/b?fieldManager=helm-locker"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a activity
			sent := a.wrap(okRoundTripper{})
			for _, u := range tc.urls {
				req, err := http.NewRequest(http.MethodGet, u, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sent.RoundTrip(req); err != nil {
					t.Fatal(err)
				}
			}
			if got := a.within(time.Minute); got != tc.want {
				t.Errorf("within(1m) = %v, want %v", got, tc.want)
			}
			if got := sent.(activityRoundTripper).WrappedRoundTripper(); got != (okRoundTripper{}) {
				t.Errorf("WrappedRoundTripper() = %v, want the wrapped one", got)
			}
			if tc.want && a.within(0) {
				t.Error("within(0) = true, want false: no request is that recent")
			}
		})
	}
}

type okRoundTripper struct{}

func (okRoundTripper) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK}, nil
}

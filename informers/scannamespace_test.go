package informers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// TestScan: a scan asks for the namespace's current objects as a watch
// (sendInitialEvents), decodes only those kept, reads nothing after the
// end of the current objects, and stops early when told it has enough; a
// Registry without a watch path of its own cannot scan.
func TestScan(t *testing.T) {
	initialEnd := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"30","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	var stream bytes.Buffer
	stream.Write(eventLine(watch.Added, configMapJSON("apps", "kept-a", "10", escapes)))
	stream.Write(eventLine(watch.Added, configMapJSON("apps", "other", "11", escapes)))
	stream.Write(eventLine(watch.Added, configMapJSON("apps", "kept-b", "12", escapes)))
	stream.Write(eventLine(watch.Bookmark, initialEnd))
	// After the current objects: never read.
	stream.Write(eventLine(watch.Added, configMapJSON("apps", "kept-c", "13", escapes)))
	var asked []*url.URL
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(stream.Bytes())
	}))
	t.Cleanup(srv.Close)
	c, err := newWatchClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{watches: c, entries: map[schema.GroupVersionResource]*entry{cmGVR: {gvr: cmGVR}}}
	keep := func(name string) bool { return name != "other" }

	got, err := r.Scan(context.Background(), cmGVR, "apps", keep, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A scan of 3 objects counts as a page toward a relist (see Relist).
	if n := r.entries[cmGVR].scanned; n != scanCost {
		t.Errorf("a scan of 3 objects counted %d toward a relist, want %d", n, scanCost)
	}
	var names []string
	for name, obj := range got.Objects {
		if obj.GetName() != name || obj.Object["data"] == nil {
			t.Errorf("kept %s as %v, want it decoded whole", name, obj.Object)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{"kept-a", "kept-b"}, names); diff != "" || got.Seen != 3 || !got.Complete {
		t.Errorf("scan kept %v (-want +got: %s), saw %d, complete %t; want 3 seen, complete", names, diff, got.Seen, got.Complete)
	}
	q := asked[0].Query()
	if asked[0].Path != "/api/v1/namespaces/apps/configmaps" || q.Get("watch") != "true" || q.Get("sendInitialEvents") != "true" ||
		q.Get("resourceVersionMatch") != "NotOlderThan" || q.Get("allowWatchBookmarks") != "true" {
		t.Errorf("the scan asked for %s, want a watch of the namespace's configmaps sending its current objects first", asked[0])
	}

	var told []string
	got, err = r.Scan(context.Background(), cmGVR, "apps", keep, func(name string, kept bool) bool {
		told = append(told, fmt.Sprintf("%s %t", name, kept))
		return !kept
	})
	if diff := cmp.Diff([]string{"kept-a true"}, told); diff != "" {
		t.Errorf("more was told (-want +got):\n%s", diff)
	}
	if err != nil || len(got.Objects) != 1 || got.Seen != 1 || got.Complete {
		t.Errorf("a scan with enough after one object = %+v, %v; want one kept, incomplete", got, err)
	}

	if _, err := (&Registry{}).Scan(context.Background(), cmGVR, "apps", keep, nil); !errors.Is(err, ErrNoScan) {
		t.Errorf("a Registry without Options.Config scanned: %v", err)
	}
}

package informers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// configMapJSON is a ConfigMap as the API server writes it, managedFields
// and all, with payload as its data.
func configMapJSON(namespace, name, rv, payload string) []byte {
	return fmt.Appendf(nil, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"6f1c9a52-5a3e-4c49-8a8e-2b7f0f6f1a11","resourceVersion":%q,"creationTimestamp":"2026-11-23T10:00:00Z","labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{"meta.helm.sh/release-name":"r","meta.helm.sh/release-namespace":%q},"managedFields":[{"manager":"helm","operation":"Update","apiVersion":"v1","time":"2026-11-23T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:payload":{}},"f:metadata":{"f:annotations":{".":{},"f:meta.helm.sh/release-name":{},"f:meta.helm.sh/release-namespace":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}}}}}]},"data":{"payload":%q}}`,
		name, namespace, rv, namespace, payload)
}

// eventLine is a watch event as the API server writes it: one JSON object
// and a newline.
func eventLine(typ watch.EventType, object []byte) []byte {
	line, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: object}})
	if err != nil {
		panic(err)
	}
	return append(line, '\n')
}

// serve answers every request with status and body, as JSON.
func serve(t testing.TB, status int, body []byte) *rest.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

type decodedEvent struct {
	Type   watch.EventType
	Object any
}

// drain collects a watch's events until the stream ends.
func drain(t testing.TB, w watch.Interface) []decodedEvent {
	t.Helper()
	defer w.Stop()
	var out []decodedEvent
	for ev := range w.ResultChan() {
		obj := ev.Object
		if f, ok := obj.(*fingerprinted); ok {
			obj = f.Unstructured
		}
		out = append(out, decodedEvent{ev.Type, obj})
	}
	return out
}

// escapes is a payload with quotes and backslashes to skip.
var escapes = strings.Repeat(`0123456789abcdef"\\`, 56)

func TestWatchDecodesOnlyTrackedObjects(t *testing.T) {
	bookmark := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"30","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	gone := []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (20)","reason":"Expired","code":410}`)
	var stream bytes.Buffer
	stream.Write(eventLine(watch.Added, configMapJSON("a", "tracked", "10", escapes)))
	stream.Write(eventLine(watch.Added, configMapJSON("b", "untracked", "11", escapes)))
	// Events over several lines, and two on one line, frame all the same.
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, eventLine(watch.Modified, configMapJSON("b", "untracked", "12", escapes)), "", "  "); err != nil {
		t.Fatal(err)
	}
	stream.Write(pretty.Bytes())
	stream.Write(bytes.TrimSuffix(eventLine(watch.Modified, configMapJSON("a", "tracked", "13", escapes)), []byte("\n")))
	stream.Write(eventLine(watch.Deleted, configMapJSON("b", "untracked", "14", escapes)))
	stream.Write(eventLine(watch.Bookmark, bookmark))
	stream.Write(eventLine(watch.Error, gone))

	config := serve(t, http.StatusOK, stream.Bytes())
	c, err := newWatchClient(config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.watch(context.Background(), cmGVR, &objectDecoder{tracked: func(_, name string) bool { return name == "tracked" }}, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, w)

	// The tracked objects, the bookmark and the Status decode as
	// client-go's dynamic client decodes them.
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	w, err = dyn.Resource(cmGVR).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := drain(t, w)
	stub := func(rv string) *watchStub {
		return &watchStub{Stub: *NewStub(&metav1.ObjectMeta{Namespace: "b", Name: "untracked", ResourceVersion: rv})}
	}
	want[1].Object, want[2].Object, want[4].Object = stub("11"), stub("12"), stub("14")
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b *watchStub) bool { return *a == *b })); diff != "" {
		t.Errorf("events (-client-go, stubbed +got):\n%s", diff)
	}
	if _, ok := got[6].Object.(*metav1.Status); !ok {
		t.Errorf("the ERROR event holds a %T, want a *metav1.Status", got[6].Object)
	}
}

func TestWatchErrorResponseIsAnAPIError(t *testing.T) {
	config := serve(t, http.StatusGone, []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}`))
	c, err := newWatchClient(config)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.watch(context.Background(), cmGVR, &objectDecoder{tracked: func(string, string) bool { return true }}, metav1.ListOptions{})
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("watch error = %v, want a ResourceExpired API error", err)
	}
}

func TestFrameReader(t *testing.T) {
	long := `{"a":"` + strings.Repeat("x", 200<<10) + `"}`
	for _, tc := range []struct {
		name    string
		in      string
		want    []string
		wantErr error
	}{
		{"one per line", "{\"a\":1}\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, io.EOF},
		{"several per line", `{"a":1} {"b":"}{"}{"c":[]}`, []string{`{"a":1}`, `{"b":"}{"}`, `{"c":[]}`}, io.EOF},
		{"one over lines", "{\n \"a\": \"x\\ny\",\n \"b\": {}\n}\n", []string{"{\n \"a\": \"x\\ny\",\n \"b\": {}\n}"}, io.EOF},
		{"longer than the read buffer", long + "\n", []string{long}, io.EOF},
		{"cut short", "{\"a\":1}\n{\"b\":", []string{`{"a":1}`}, io.ErrUnexpectedEOF},
		{"not objects", "{\"a\":1}\n]", []string{`{"a":1}`}, errNotAnEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := framer{}.NewFrameReader(io.NopCloser(strings.NewReader(tc.in)))
			var got []string
			var err error
			for {
				// Small reads: a frame comes in pieces, each but the last
				// with io.ErrShortBuffer.
				var frame []byte
				for {
					p := make([]byte, 1000)
					var n int
					n, err = r.Read(p)
					frame = append(frame, p[:n]...)
					if err != io.ErrShortBuffer {
						break
					}
				}
				if err != nil {
					break
				}
				got = append(got, string(frame))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestEventDecoderRefusesBrokenEvents(t *testing.T) {
	for _, in := range []string{
		`{"type":"ADDED"}`,
		`{"object":{}}`,
		`{"type":1,"object":{}}`,
		`{"type":"ADDED","object":{}`,
		`[]`,
	} {
		if _, _, err := (eventDecoder{}).Decode([]byte(in), nil, &metav1.WatchEvent{}); err == nil {
			t.Errorf("Decode(%s) took it", in)
		}
	}
}

// BenchmarkWatchDecode reads a watch stream of ConfigMaps, one in five
// tracked, as a Registry's informers read a cluster at cold start: through
// client-go's dynamic client, and through the Registry's own watch path
// (Options.Config), with the tracked objects' managedFields decoded and
// deferred (Options.ReadsManagedFields). ns/op is per event.
func BenchmarkWatchDecode(b *testing.B) {
	const n = 1000
	// 1 KB of data, as make bench writes.
	payload := strings.Repeat("locked-data-", 85)
	var stream bytes.Buffer
	for i := range n {
		stream.Write(eventLine(watch.Added, configMapJSON(fmt.Sprintf("ns-%d", i%20), fmt.Sprintf("cm-%d", i), fmt.Sprint(1000+i), payload)))
	}
	config := serve(b, http.StatusOK, stream.Bytes())
	tracked := func(_, name string) bool { return name[len(name)-1] == '5' || name[len(name)-1] == '0' }
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		b.Fatal(err)
	}
	ours, err := newWatchClient(config)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		watch func() (watch.Interface, error)
	}{
		{"client-go", func() (watch.Interface, error) {
			return dyn.Resource(cmGVR).Watch(context.Background(), metav1.ListOptions{})
		}},
		{"registry", func() (watch.Interface, error) {
			return ours.watch(context.Background(), cmGVR, &objectDecoder{tracked: tracked}, metav1.ListOptions{})
		}},
		{"registry, managedFields deferred", func() (watch.Interface, error) {
			d := &objectDecoder{tracked: tracked, readsManagedFields: func(_, _ string) bool { return false }}
			return ours.watch(context.Background(), cmGVR, d, metav1.ListOptions{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(stream.Len()))
			for b.Loop() {
				w, err := tc.watch()
				if err != nil {
					b.Fatal(err)
				}
				if got := len(drain(b, w)); got != n {
					b.Fatalf("%d events, want %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}

func TestWithoutManagedFields(t *testing.T) {
	const entries = `[{"manager":"helm","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:key":{}}}}]`
	for name, tc := range map[string]struct {
		in    string
		taken bool
	}{
		"last in metadata":  {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","managedFields":` + entries + `},"data":{"key":"v"}}`, true},
		"first in metadata": {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"managedFields":` + entries + `,"name":"a","namespace":"ns"},"data":{"key":"v"}}`, true},
		"between fields":    {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","managedFields":` + entries + `,"namespace":"ns"},"data":{"key":"v"}}`, true},
		"alone, spaced":     {"{\"kind\":\"ConfigMap\",\"metadata\": { \"managedFields\" : " + entries + " } ,\"data\":{}}", true},
		"spaced commas":     {"{\"metadata\":{\"name\":\"a\" ,\n \"managedFields\":" + entries + "\n, \"uid\":\"u\"}}", true},
		"none":              {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"managedFields":"x"}}`, false},
		"only elsewhere":    {`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"metadata":{"managedFields":[]}}}`, false},
		"empty list":        {`{"metadata":{"name":"a","managedFields":[]}}`, true},
		"not JSON":          {`{"metadata":{"name":"a","managedFields":[`, false},
	} {
		t.Run(name, func(t *testing.T) {
			slim, mf := withoutManagedFields([]byte(tc.in))
			if taken := mf != nil; taken != tc.taken {
				t.Fatalf("took managedFields %q, want taken %v", mf, tc.taken)
			}
			if !tc.taken {
				if string(slim) != tc.in {
					t.Errorf("changed %s into %s", tc.in, slim)
				}
				return
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.in), &want); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(slim, &got); err != nil {
				t.Fatalf("%s is not JSON: %v", slim, err)
			}
			if _, left := got["metadata"].(map[string]any)["managedFields"]; left {
				t.Errorf("%s still has managedFields", slim)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(slim); err != nil {
				// Only objects with a kind decode as Unstructured.
				u.Object = got
			}
			withManagedFields(u, mf)
			var full map[string]any
			if err := json.Unmarshal(mustJSON(t, u.Object), &full); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, full); diff != "" {
				t.Errorf("put back (-want +got):\n%s", diff)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/engine"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// fakeLocks holds ConfigMap ns/c and Deployment ns/web, and denies every
// change of data.key from "declared", and scaling away from 2.
type fakeLocks struct {
	helmWorking bool
	recorded    []Denial
	scaled      [2]int64
	judged      int
}

func (f *fakeLocks) Prevents(gvr schema.GroupVersionResource, namespace, name string) bool {
	return namespace == "ns" && (gvr.Resource == "configmaps" && name == "c" || gvr.Resource == "deployments" && name == "web")
}

func (f *fakeLocks) Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (engine.Judgement, error) {
	f.judged++
	target := obj
	if target == nil {
		target = old
	}
	j := engine.Judgement{Key: "ns/web", Ref: engine.ObjectRef{GVR: gvr, Namespace: target.GetNamespace(), Name: target.GetName()}, Kind: "ConfigMap"}
	if obj == nil {
		j.Deleted = true
		return j, nil
	}
	if v, _, _ := unstructured.NestedString(obj.Object, "data", "key"); v != "declared" {
		j.Fields = []engine.DeniedField{{Path: "/data/key", Declared: "declared"}}
	}
	return j, nil
}

func (f *fakeLocks) JudgeScale(_ context.Context, gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error) {
	f.judged++
	f.scaled = [2]int64{oldReplicas, replicas}
	j := engine.Judgement{Key: "ns/web", Ref: engine.ObjectRef{GVR: gvr, Namespace: namespace, Name: name}, Kind: "Deployment"}
	if replicas != 2 {
		j.Fields = []engine.DeniedField{{Path: "/spec/replicas", Declared: int64(2)}}
	}
	return j, nil
}

func (f *fakeLocks) Confirm(context.Context, string) (bool, error) { return !f.helmWorking, nil }

func (f *fakeLocks) Describe(key string) (string, string) {
	return "HelmRelease " + key, "helm upgrade the release ns/web"
}

func (f *fakeLocks) Record(_ string, d Denial) { f.recorded = append(f.recorded, d) }

func TestHandler(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cm := func(v string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"key":"` + v + `"}}`)}
	}
	scale := func(n int) runtime.RawExtension {
		data, _ := json.Marshal(map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": map[string]any{"name": "web", "namespace": "ns"}, "spec": map[string]any{"replicas": n}})
		return runtime.RawExtension{Raw: data}
	}
	yes := true
	alice := authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	tests := []struct {
		name        string
		req         admissionv1.AdmissionRequest
		noLocks     bool
		helmWorking bool
		wantAllowed bool
		wantMessage string
		wantRecord  []string // user and operation of each denial recorded
		wantScaled  [2]int64
	}{
		{name: "an edit of a held field",
			req:         admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: alice, OldObject: cm("declared"), Object: cm("edited")},
			wantMessage: `ConfigMap ns/c is locked by HelmRelease ns/web: /data/key must stay "declared"; to change it: helm upgrade the release ns/web`,
			wantRecord:  []string{"alice UPDATE"}},
		{name: "an edit that changes no held field", wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: alice, OldObject: cm("declared"), Object: cm("declared")}},
		{name: "a deletion",
			req:         admissionv1.AdmissionRequest{Operation: admissionv1.Delete, UserInfo: alice, OldObject: cm("declared")},
			wantMessage: "ConfigMap ns/c is locked by HelmRelease ns/web and may not be deleted; to remove it: helm upgrade the release ns/web",
			wantRecord:  []string{"alice DELETE"}},
		{name: "a dry run is judged alike and records nothing",
			req:         admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: alice, DryRun: &yes, OldObject: cm("declared"), Object: cm("edited")},
			wantMessage: `ConfigMap ns/c is locked by HelmRelease ns/web: /data/key must stay "declared"; to change it: helm upgrade the release ns/web`},
		{name: "the garbage collector deletes", wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Delete, UserInfo: authenticationv1.UserInfo{Username: GarbageCollector}, OldObject: cm("declared")}},
		{name: "the namespace controller deletes", wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Delete, UserInfo: authenticationv1.UserInfo{Username: NamespaceController}, OldObject: cm("declared")}},
		{name: "break glass", wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: authenticationv1.UserInfo{Username: "bob", Groups: []string{"oncall"}}, OldObject: cm("declared"), Object: cm("edited")}},
		{name: "Helm at work", helmWorking: true, wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: alice, OldObject: cm("declared"), Object: cm("edited")}},
		{name: "a replica standing by", noLocks: true, wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, UserInfo: alice, OldObject: cm("declared"), Object: cm("edited")}},
		{name: "scale",
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, SubResource: "scale", Name: "web", Namespace: "ns", UserInfo: alice,
				Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, OldObject: scale(2), Object: scale(5)},
			wantMessage: "Deployment ns/web is locked by HelmRelease ns/web: /spec/replicas must stay 2; to change it: helm upgrade the release ns/web",
			wantRecord:  []string{"alice UPDATE/scale"}, wantScaled: [2]int64{2, 5}},
		{name: "status", wantAllowed: true,
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Update, SubResource: "status", UserInfo: alice, OldObject: cm("declared"), Object: cm("edited")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locks := &fakeLocks{helmWorking: tt.helmWorking}
			observer := &fakeObserver{}
			h := NewHandler(func() Locks {
				if tt.noLocks {
					return nil
				}
				return locks
			}, Options{ExemptGroups: []string{"oncall"}, Now: func() time.Time { return at }, Observer: observer})
			req := tt.req
			req.UID = "uid-1"
			if req.Resource.Resource == "" {
				req.Resource = metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}
				req.Namespace, req.Name = "ns", "c"
			}
			reviewed := observer.reviewed
			body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &req})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("response %q: %v", rec.Body.String(), err)
			}
			if out.Response.UID != "uid-1" || out.APIVersion != "admission.k8s.io/v1" {
				t.Errorf("response UID %q, apiVersion %q", out.Response.UID, out.APIVersion)
			}
			if out.Response.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v; %+v", out.Response.Allowed, tt.wantAllowed, out.Response.Result)
			}
			reviewed = observer.reviewed
			if len(observer.answered) != 1 || !observer.answered[0].Equal(at) {
				t.Errorf("Answered was told %v; want once, %v, dry run or not", observer.answered, at)
			}
			switch dryRun := tt.req.DryRun != nil && *tt.req.DryRun; {
			case dryRun && len(reviewed) != 0:
				t.Errorf("Reviewed was told %v of a dry run; want nothing recorded", reviewed)
			case !dryRun && (len(reviewed) != 1 || reviewed[0] != tt.wantAllowed):
				t.Errorf("Reviewed was told %v; want once, %v", reviewed, tt.wantAllowed)
			}
			if !tt.wantAllowed {
				if r := out.Response.Result; r == nil || r.Code != http.StatusForbidden || r.Message != tt.wantMessage {
					t.Errorf("result %+v\nwant code 403 and message %q", r, tt.wantMessage)
				}
			}
			var recorded []string
			for _, d := range locks.recorded {
				recorded = append(recorded, d.User+" "+d.Operation)
				if !d.Time.Equal(at) || !d.Judgement.Denied() {
					t.Errorf("recorded %+v", d)
				}
			}
			if diff := cmp.Diff(tt.wantRecord, recorded); diff != "" {
				t.Errorf("denials recorded (-want +got):\n%s", diff)
			}
			if locks.scaled != tt.wantScaled {
				t.Errorf("JudgeScale saw replicas %v, want %v", locks.scaled, tt.wantScaled)
			}
		})
	}
}

func TestHandlerRefusesWhatIsNoReview(t *testing.T) {
	h := NewHandler(func() Locks { return &fakeLocks{} }, Options{})
	for _, body := range []string{"", "{}", "not json"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader([]byte(body))))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("body %q: status %d, want 400", body, rec.Code)
		}
	}
}

// fakeObserver keeps what the handler tells it. shedSoFar reads what a
// handler served by a server's goroutines shed.
type fakeObserver struct {
	reviewed []bool
	answered []time.Time
	mu       sync.Mutex
	shed     []string
}

func (f *fakeObserver) Reviewed(allowed bool) { f.reviewed = append(f.reviewed, allowed) }
func (f *fakeObserver) Answered(at time.Time) { f.answered = append(f.answered, at) }

func (f *fakeObserver) Shed(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shed = append(f.shed, reason)
}

func (f *fakeObserver) shedSoFar() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.shed)
}

// TestHandlerLooksBeforeItDecodes: whether a lock holds the object is
// asked from the request's resource, namespace and name; a review no lock
// holds is allowed without decoding either object (so even objects that
// are not JSON objects pass) and records nothing, whatever its body
// carries; and one whose body is another object than it names is never
// judged. Anyone who can reach the port can POST these (issue 31).
func TestHandlerLooksBeforeItDecodes(t *testing.T) {
	held := runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"key":"edited"}}`)}
	heldBefore := runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"key":"declared"}}`)}
	other := runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other","namespace":"ns"},"data":{"key":"edited"}}`)}
	notJSON := runtime.RawExtension{Raw: []byte(`["not", "an", "object"]`)}
	configmaps := metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	tests := []struct {
		name string
		req  admissionv1.AdmissionRequest
		// forged: the review names a held object and carries another,
		// which the API server never sends; it is counted.
		forged bool
	}{
		{name: "names an object no lock holds, carries a held one",
			req: admissionv1.AdmissionRequest{Name: "other", Namespace: "ns", OldObject: heldBefore, Object: held}},
		{name: "names an object no lock holds, carries no object at all",
			req: admissionv1.AdmissionRequest{Name: "other", Namespace: "ns", OldObject: notJSON, Object: notJSON}},
		{name: "names a held object, carries another", forged: true,
			req: admissionv1.AdmissionRequest{Name: "c", Namespace: "ns", OldObject: heldBefore, Object: other}},
		{name: "names a held object in another namespace",
			req: admissionv1.AdmissionRequest{Name: "c", Namespace: "elsewhere", OldObject: heldBefore, Object: held}},
		{name: "a create with a generated name",
			req: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns", Object: held}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locks := &fakeLocks{}
			req := tt.req
			req.UID, req.Resource = "uid-1", configmaps
			if req.Operation == "" {
				req.Operation = admissionv1.Update
			}
			req.UserInfo = authenticationv1.UserInfo{Username: "mallory"}
			observer := &fakeObserver{}
			out := serve(t, NewHandler(func() Locks { return locks }, Options{Observer: observer}), &req)
			if !out.Allowed || locks.judged != 0 || len(locks.recorded) != 0 {
				t.Errorf("allowed %v, judged %d times, recorded %v; want allowed, never judged, nothing recorded", out.Allowed, locks.judged, locks.recorded)
			}
			var wantShed []string
			if tt.forged {
				wantShed = []string{ShedMismatch}
			}
			if diff := cmp.Diff(wantShed, observer.shed); diff != "" {
				t.Errorf("shed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandlerSheds: past MaxInFlight reviews at once, or past
// MaxReviewBytes, a request is refused unread, which failurePolicy Ignore
// lets through, and counted.
func TestHandlerSheds(t *testing.T) {
	observer := &fakeObserver{}
	h := NewHandler(func() Locks { return &fakeLocks{} }, Options{Observer: observer, MaxInFlight: 1})
	h.inFlight <- struct{}{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(reviewBody(t, &admissionv1.AdmissionRequest{UID: "1"}))))
	if rec.Code != http.StatusTooManyRequests {
		t.Errorf("with every slot taken: status %d, want 429", rec.Code)
	}
	<-h.inFlight
	huge := bytes.Repeat([]byte(" "), MaxReviewBytes+1)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(huge)))
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of %d bytes: status %d, want 413", len(huge), rec.Code)
	}
	if diff := cmp.Diff([]string{ShedBusy, ShedTooLarge}, observer.shed); diff != "" {
		t.Errorf("shed (-want +got):\n%s", diff)
	}
	if len(h.inFlight) != 0 {
		t.Errorf("%d slots still taken after the requests were answered", len(h.inFlight))
	}
}

// confirmSlowly is fakeLocks whose Confirm takes wait, as one that asks
// the API server may, and says no if the review's context ends first.
type confirmSlowly struct {
	*fakeLocks
	wait time.Duration
}

func (c *confirmSlowly) Confirm(ctx context.Context, _ string) (bool, error) {
	select {
	case <-time.After(c.wait):
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// TestSlowBodyHoldsASlotBriefly: clients that send a review's headers and
// then stall, one for every slot, hold them for MaxBodyRead at most
// (issue 31: they held them for the server's whole ReadTimeout, and every
// real review meanwhile failed open). A real review sent just after gets
// a slot within that bound, and is judged with a context the body's
// deadline did not cancel, however long its Confirm takes.
func TestSlowBodyHoldsASlotBriefly(t *testing.T) {
	const maxBodyRead = 200 * time.Millisecond
	observer := &fakeObserver{}
	locks := &confirmSlowly{fakeLocks: &fakeLocks{}, wait: 2 * maxBodyRead}
	h := NewHandler(func() Locks { return locks }, Options{Observer: observer, MaxBodyRead: maxBodyRead})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range DefaultMaxInFlight {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(h.inFlight) < DefaultMaxInFlight; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots taken by the stalled clients; want all %d", len(h.inFlight), DefaultMaxInFlight)
		}
	}

	edit := reviewBody(t, &admissionv1.AdmissionRequest{UID: "real", Operation: admissionv1.Update, Name: "c", Namespace: "ns",
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, UserInfo: authenticationv1.UserInfo{Username: "alice"},
		OldObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"key":"declared"}}`)},
		Object:    runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"key":"edited"}}`)}})
	start := time.Now()
	var out admissionv1.AdmissionReview
	for {
		resp, err := http.Post(srv.URL+"/validate", "application/json", bytes.NewReader(edit))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
				t.Fatalf("response %q: %v", body, err)
			}
			break
		}
		if resp.StatusCode != http.StatusTooManyRequests || time.Since(start) > 5*time.Second {
			t.Fatalf("a real review after %v: status %d %q; want a slot within %v", time.Since(start).Round(time.Millisecond), resp.StatusCode, body, maxBodyRead)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Past the bound, the time to answer: Confirm alone takes twice it.
	if waited := time.Since(start) - locks.wait; waited > maxBodyRead+300*time.Millisecond {
		t.Errorf("a real review waited %v for a slot; want about %v at most", waited.Round(time.Millisecond), maxBodyRead)
	}
	if out.Response.Allowed {
		t.Errorf("the real review of a held edit was allowed; want denied (its context ended while Confirm waited?)")
	}
	slow := 0
	for _, reason := range observer.shedSoFar() {
		if reason == ShedSlowBody {
			slow++
		}
	}
	if slow != DefaultMaxInFlight {
		t.Errorf("shed %q; want %d %s, one for each stalled client", observer.shedSoFar(), DefaultMaxInFlight, ShedSlowBody)
	}
}

// TestHandlerMemory measures what a review of the largest size costs: one
// that no lock holds must cost about its body, read once and its objects
// copied once, and nothing like a decode (issue 31: a 6 MiB review
// allocated 110 MiB when both objects were decoded first).
func TestHandlerMemory(t *testing.T) {
	value := strings.Repeat("x", MaxReviewBytes/2-4096)
	object := func(name string) runtime.RawExtension {
		data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": "ns"},
			"data": map[string]any{"key": "declared", "big": value}})
		return runtime.RawExtension{Raw: data}
	}
	measure := func(name string) (uint64, int) {
		req := &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update, Name: name, Namespace: "ns",
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, OldObject: object(name), Object: object(name)}
		body := reviewBody(t, req)
		h := NewHandler(func() Locks { return &fakeLocks{} }, Options{})
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
		goruntime.ReadMemStats(&after)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		return after.TotalAlloc - before.TotalAlloc, len(body)
	}
	unheld, size := measure("other")
	held, _ := measure("c")
	t.Logf("a review of %.1f MiB allocates %.1f MiB when no lock holds its object, %.1f MiB when one does", mib(uint64(size)), mib(unheld), mib(held))
	if unheld > 3*uint64(size) {
		t.Errorf("a review of %d bytes no lock holds allocated %d bytes; want at most 3 times its size", size, unheld)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

func reviewBody(t *testing.T, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// serve posts req to h and returns its response.
func serve(t *testing.T, h *Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(reviewBody(t, req))))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return out.Response
}

// TestHandlerAnswersTheProbe: the dry-run create of a Lease the probe
// webhook sends is allowed with ProbeWarning, whether or not any lock is
// held, and records nothing; a real create of a Lease gets no warning.
func TestHandlerAnswersTheProbe(t *testing.T) {
	yes := true
	leases := metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	for _, tt := range []struct {
		name        string
		dryRun      *bool
		noLocks     bool
		wantWarning bool
	}{
		{name: "the probe", dryRun: &yes, wantWarning: true},
		{name: "the probe on a standby that holds nothing", dryRun: &yes, noLocks: true, wantWarning: true},
		{name: "a Lease really created"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			locks := &fakeLocks{}
			observer := &fakeObserver{}
			h := NewHandler(func() Locks {
				if tt.noLocks {
					return nil
				}
				return locks
			}, Options{Observer: observer})
			out := serve(t, h, &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Resource: leases, Namespace: "ns", Name: "hl-admission-probe",
				DryRun: tt.dryRun, Object: runtime.RawExtension{Raw: []byte(`{"not": "decoded"}`)}})
			if !out.Allowed || slices.Contains(out.Warnings, ProbeWarning) != tt.wantWarning || locks.judged != 0 || len(locks.recorded) != 0 {
				t.Errorf("allowed %v, warnings %v, judged %d, recorded %v; want allowed, the probe's warning %v, nothing judged or recorded",
					out.Allowed, out.Warnings, locks.judged, locks.recorded, tt.wantWarning)
			}
			if len(observer.answered) != 1 {
				t.Errorf("Answered was told %d times; want once, so that the probe keeps the last review's time current", len(observer.answered))
			}
		})
	}
}

// contextLocks is fakeLocks that keeps the context JudgeScale is given.
type contextLocks struct {
	fakeLocks
	ctx context.Context
}

func (l *contextLocks) JudgeScale(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error) {
	l.ctx = ctx
	return l.fakeLocks.JudgeScale(ctx, gvr, namespace, name, oldReplicas, replicas)
}

// TestJudgeScaleWithinTheReview: a scale request is judged within the
// review's context, so that what JudgeScale reads ends with the review.
func TestJudgeScaleWithinTheReview(t *testing.T) {
	locks := &contextLocks{}
	h := NewHandler(func() Locks { return locks }, Options{})
	scale := func(n int) runtime.RawExtension {
		data, _ := json.Marshal(map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": map[string]any{"name": "web", "namespace": "ns"}, "spec": map[string]any{"replicas": n}})
		return runtime.RawExtension{Raw: data}
	}
	req := admissionv1.AdmissionRequest{UID: "uid-1", Operation: admissionv1.Update, SubResource: "scale", Name: "web", Namespace: "ns",
		Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, OldObject: scale(2), Object: scale(5)}
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &req})
	type reviewKey struct{}
	ctx := context.WithValue(t.Context(), reviewKey{}, "review")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)).WithContext(ctx))
	if locks.ctx == nil || locks.ctx.Value(reviewKey{}) != "review" {
		t.Errorf("JudgeScale was given context %v; want the review's", locks.ctx)
	}
}

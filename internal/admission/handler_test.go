package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// fakeLocks denies every change of data.key from "declared", and scaling
// away from 2.
type fakeLocks struct {
	helmWorking bool
	recorded    []Denial
	scaled      [2]int64
}

func (f *fakeLocks) Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (engine.Judgement, error) {
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

func (f *fakeLocks) JudgeScale(gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error) {
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
			var reviewed []bool
			h := NewHandler(func() Locks {
				if tt.noLocks {
					return nil
				}
				return locks
			}, Options{ExemptGroups: []string{"oncall"}, Now: func() time.Time { return at }, Reviewed: func(allowed bool) { reviewed = append(reviewed, allowed) }})
			req := tt.req
			req.UID = "uid-1"
			if req.Resource.Resource == "" {
				req.Resource = metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}
			}
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

package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestParsePointer(t *testing.T) {
	tests := []struct {
		in      string
		want    Pointer
		wantErr bool
	}{
		{in: "/spec/replicas", want: Pointer{"spec", "replicas"}},
		{in: "/metadata/annotations/example.com~1hash", want: Pointer{"metadata", "annotations", "example.com/hash"}},
		{in: "/a~0b", want: Pointer{"a~b"}},
		{in: "/spec/ports/0", want: Pointer{"spec", "ports", "0"}},
		{in: "spec/replicas", wantErr: true},
		{in: "", wantErr: true},
		{in: "/bad~2escape", wantErr: true},
		{in: "/trailing~", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePointer(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePointer(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePointer(%q) (-want +got):\n%s", tt.in, diff)
			}
			if err == nil && got.String() != tt.in {
				t.Errorf("String() = %q, want %q back", got.String(), tt.in)
			}
		})
	}
}

func TestDriftPathsTakeIntAndFloatAsEqual(t *testing.T) {
	live := map[string]any{"spec": map[string]any{"replicas": int64(1)}}
	desired := map[string]any{"spec": map[string]any{"replicas": float64(1)}}
	if got := driftPaths(live, desired); got != nil {
		t.Errorf("driftPaths(1, 1.0) = %v, want none", got)
	}
	desired["spec"].(map[string]any)["replicas"] = float64(2)
	if got := driftPaths(live, desired); len(got) != 1 {
		t.Errorf("driftPaths(1, 2.0) = %v, want /spec/replicas", got)
	}
}

func TestDriftPaths(t *testing.T) {
	tests := []struct {
		name          string
		live, desired string
		want          []string
	}{
		{name: "scalar", live: "spec: {replicas: 5}", desired: "spec: {replicas: 1}", want: []string{"/spec/replicas"}},
		{name: "added key", live: "metadata: {labels: {a: b, x: z}}", desired: "metadata: {labels: {a: b}}", want: []string{"/metadata/labels/x"}},
		{name: "list element", live: "spec: {ports: [{port: 81}]}", desired: "spec: {ports: [{port: 80}]}", want: []string{"/spec/ports/0/port"}},
		{name: "list length", live: "spec: {ports: [{port: 80}, {port: 81}]}", desired: "spec: {ports: [{port: 80}]}", want: []string{"/spec/ports"}},
		{name: "escaped key", live: "metadata: {annotations: {a/b: x}}", desired: "metadata: {annotations: {a/b: y}}", want: []string{"/metadata/annotations/a~1b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, driftPaths(doc(t, tt.live), doc(t, tt.desired))); diff != "" {
				t.Errorf("driftPaths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAttribute reads real managedFields shapes: a kubectl patch that took
// a port (keyed list) and replicas, Helm's apply, and the locker itself.
func TestAttribute(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	later := metav1.NewTime(at.Add(time.Minute))
	live := &unstructured.Unstructured{Object: obj(t, `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec:
  replicas: 5
  ports: [{port: 81, protocol: TCP, name: http}]
  selector: {app: web}
`)}
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "helm", Operation: metav1.ManagedFieldsOperationApply, Time: &at, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:selector":{"f:app":{}}}}`)}},
		{Manager: "kubectl-patch", Operation: metav1.ManagedFieldsOperationUpdate, Time: &later, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:ports":{"k:{\"port\":81,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}}}}`)}},
		{Manager: "hpa", Operation: metav1.ManagedFieldsOperationUpdate, Time: &later, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
		{Manager: "helm-locker", Operation: metav1.ManagedFieldsOperationUpdate, Time: &later, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}},
	})
	tests := []struct {
		name  string
		paths []string
		want  []Manager
	}{
		{name: "keyed list entry", paths: []string{"/spec/ports/0/port"}, want: []Manager{{Name: "kubectl-patch", Operation: "Update", Time: later.Time}}},
		{name: "the list itself", paths: []string{"/spec/ports"}, want: []Manager{{Name: "kubectl-patch", Operation: "Update", Time: later.Time}}},
		{name: "scalar, not the engine", paths: []string{"/spec/replicas"}, want: []Manager{{Name: "hpa", Operation: "Update", Time: later.Time}}},
		{name: "two owners", paths: []string{"/spec/selector/app", "/spec/replicas"}, want: []Manager{
			{Name: "helm", Operation: "Apply", Time: at.Time}, {Name: "hpa", Operation: "Update", Time: later.Time}}},
		{name: "unowned: the latest writer", paths: []string{"/spec/type"}, want: []Manager{{Name: "kubectl-patch", Operation: "Update", Time: later.Time}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, attribute(live, tt.paths, "helm-locker")); diff != "" {
				t.Errorf("attribute (-want +got):\n%s", diff)
			}
		})
	}
}

// doc decodes a YAML fragment that need not be a Kubernetes object.
func doc(t *testing.T, y string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

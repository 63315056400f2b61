package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
		{in: `/spec/ports/{"port":53,"protocol":"TCP"}`, want: Pointer{"spec", "ports", `{"port":53,"protocol":"TCP"}`}},
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

// noSchema compares as for a kind without a schema here: lists by position.
var noSchema = mergeRules{types: deducedTypes}

func TestDriftPathsTakeIntAndFloatAsEqual(t *testing.T) {
	live := map[string]any{"spec": map[string]any{"replicas": int64(1)}}
	desired := map[string]any{"spec": map[string]any{"replicas": float64(1)}}
	if got := noSchema.kindOf(desired).driftPaths(live, desired); got != nil {
		t.Errorf("driftPaths(1, 1.0) = %v, want none", got)
	}
	desired["spec"].(map[string]any)["replicas"] = float64(2)
	if got := noSchema.kindOf(desired).driftPaths(live, desired); len(got) != 1 {
		t.Errorf("driftPaths(1, 2.0) = %v, want /spec/replicas", got)
	}
}

func TestDriftPaths(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\n"
	const pod = "apiVersion: v1\nkind: Pod\n"
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
		{
			name:    "keyed entry, by all its keys",
			live:    svc + "spec: {ports: [{port: 53, protocol: UDP, targetPort: 53}, {port: 53, protocol: TCP, targetPort: 5353}]}",
			desired: svc + "spec: {ports: [{port: 53, protocol: UDP, targetPort: 53}, {port: 53, protocol: TCP, targetPort: 53}]}",
			want:    []string{`/spec/ports/{"port":53,"protocol":"TCP"}/targetPort`},
		},
		{
			name:    "keyed entries in another order alone: the list",
			live:    svc + "spec: {ports: [{port: 53, protocol: TCP}, {port: 53, protocol: UDP}]}",
			desired: svc + "spec: {ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]}",
			want:    []string{"/spec/ports"},
		},
		{
			name:    "keyed entry added and removed",
			live:    svc + "spec: {ports: [{port: 80, protocol: TCP}, {port: 81, protocol: TCP}]}",
			desired: svc + "spec: {ports: [{port: 80, protocol: TCP}, {port: 82, protocol: TCP}]}",
			want:    []string{`/spec/ports/{"port":82,"protocol":"TCP"}`, `/spec/ports/{"port":81,"protocol":"TCP"}`},
		},
		{
			name:    "escaped keys",
			live:    pod + "spec: {containers: [{name: c, env: [{name: a/b~c, value: x}]}]}",
			desired: pod + "spec: {containers: [{name: c, env: [{name: a/b~c, value: y}]}]}",
			want:    []string{`/spec/containers/{"name":"c"}/env/{"name":"a~1b~0c"}/value`},
		},
		{
			name:    "atomic list, by position",
			live:    pod + "spec: {containers: [{name: c, args: [a, x]}]}",
			desired: pod + "spec: {containers: [{name: c, args: [a, b]}]}",
			want:    []string{`/spec/containers/{"name":"c"}/args/1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live, desired := doc(t, tt.live), doc(t, tt.desired)
			got := rulesFor((&unstructured.Unstructured{Object: desired}).GroupVersionKind()).kindOf(desired).driftPaths(live, desired)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("driftPaths (-want +got):\n%s", diff)
			}
			// Each names what it says, in both objects.
			for _, text := range got {
				p, err := ParsePointer(text)
				if err != nil {
					t.Fatalf("ParsePointer(%q): %v", text, err)
				}
				lv, inLive := p.get(live)
				dv, inDesired := p.get(desired)
				if inLive && inDesired && reflect.DeepEqual(lv, dv) {
					t.Errorf("%s: %v in both live and desired, want a difference", text, lv)
				}
				if !inLive && !inDesired {
					t.Errorf("%s: in neither live nor desired", text)
				}
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
			k := rulesFor(live.GroupVersionKind()).kindOf(live.Object)
			if diff := cmp.Diff(tt.want, attribute(live, k, tt.paths, "helm-locker")); diff != "" {
				t.Errorf("attribute (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAttributeContainers: an entry that holds a map or list as a value,
// and none of its fields, owns what is in it only if the schema holds it
// whole. kubectl apply creates a ConfigMap owning data's fields; once
// kubectl edit changes one, the apply's entry keeps only {"f:data":{}},
// and the edit alone changed /data/key. A Deployment's selector is atomic:
// the one entry that holds it owns all of it.
func TestAttributeContainers(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	tests := []struct {
		name    string
		live    string
		entries []metav1.ManagedFieldsEntry
		path    string
		want    []string
	}{
		{name: "granular map: the container's owner did not change its fields",
			live:    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {key: edited}\n",
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-client-side-apply", `{"f:data":{}}`), entry("kubectl-edit", `{"f:data":{"f:key":{}}}`)},
			path:    "/data/key", want: []string{"kubectl-edit"}},
		{name: "granular map: the container itself",
			live:    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {key: edited}\n",
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-client-side-apply", `{"f:data":{}}`), entry("kubectl-edit", `{"f:data":{"f:key":{}}}`)},
			path:    "/data", want: []string{"kubectl-client-side-apply", "kubectl-edit"}},
		{name: "atomic map: owned whole",
			live:    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {selector: {matchLabels: {app: x}}}\n",
			entries: []metav1.ManagedFieldsEntry{entry("helm", `{"f:spec":{"f:selector":{}}}`)},
			path:    "/spec/selector/matchLabels/app", want: []string{"helm"}},
		{name: "atomic list: owned whole",
			live:    "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, args: [a, b]}]}\n",
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", `{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:args":{}}}}}`)},
			path:    `/spec/containers/{"name":"c"}/args/1`, want: []string{"kubectl-edit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := &unstructured.Unstructured{Object: obj(t, tt.live)}
			live.SetManagedFields(tt.entries)
			var got []string
			for _, m := range attribute(live, rulesFor(live.GroupVersionKind()).kindOf(live.Object), []string{tt.path}, "helm-locker") {
				got = append(got, m.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("attribute (-want +got):\n%s", diff)
			}
		})
	}
}

// doc decodes a YAML fragment that need not be a Kubernetes object.
// TestStoredKeys: a keyed entry is named by all the keys the API server
// stored for it, whether the manifest said them or left them to their
// defaults, so that the entry a drift replaced and the one it added read
// alike.
func TestStoredKeys(t *testing.T) {
	stored := doc(t, "apiVersion: v1\nkind: Service\nspec: {ports: [{port: 80, protocol: TCP, targetPort: 8080}]}")
	k := rulesFor((&unstructured.Unstructured{Object: stored}).GroupVersionKind()).kindOf(stored)
	got := k.storedKeys([]string{
		`/spec/ports/{"port":80}`,
		`/spec/ports/{"port":80}/targetPort`,
		`/spec/ports/{"port":81,"protocol":"TCP"}`,
		"/spec/type",
	}, stored)
	want := []string{
		`/spec/ports/{"port":80,"protocol":"TCP"}`,
		`/spec/ports/{"port":80,"protocol":"TCP"}/targetPort`,
		`/spec/ports/{"port":81,"protocol":"TCP"}`,
		"/spec/type",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("storedKeys (-want +got):\n%s", diff)
	}
}

package engine

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

func obj(t testing.TB, y string) map[string]any {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

var serviceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Service"}

func TestDesiredAndPatch(t *testing.T) {
	const service = `
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  type: ClusterIP
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
`
	tests := []struct {
		name     string
		gvk      schema.GroupVersionKind // empty: a custom resource
		declared string
		live     string
		want     string // the desired object
		// wantPatch is the patch sent, or "" for none.
		wantPatch string
	}{
		{
			name:     "in line: server defaults and metadata are not drift",
			gvk:      serviceGVK,
			declared: service,
			live: `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns, resourceVersion: "7", labels: {app: web}}
spec:
  type: ClusterIP
  clusterIP: 10.0.0.9
  sessionAffinity: None
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
`,
			want: `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns, resourceVersion: "7", labels: {app: web}}
spec:
  type: ClusterIP
  clusterIP: 10.0.0.9
  sessionAffinity: None
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
`,
		},
		{
			name:     "a changed scalar is restored, a foreign label stays",
			gvk:      serviceGVK,
			declared: service,
			live: `
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web, team: payments}}
spec:
  type: NodePort
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP, nodePort: 30080}]
`,
			want: `
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web, team: payments}}
spec:
  type: ClusterIP
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP, nodePort: 30080}]
`,
			wantPatch: `{"spec":{"type":"ClusterIP"}}`,
		},
		{
			name:     "a drifted entry of a keyed list is removed, not kept beside the declared one",
			gvk:      serviceGVK,
			declared: service,
			live: `
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  type: ClusterIP
  ports: [{name: http, port: 81, targetPort: http, protocol: TCP}]
`,
			want:      service,
			wantPatch: `{"spec":{"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"http"}]}}`,
		},
		{
			name: "a keyed list entry keeps what the server defaulted inside it",
			gvk:  schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			declared: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app, image: "nginx:1"}]
`,
			live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app, image: "nginx:2", imagePullPolicy: IfNotPresent}, {name: sidecar, image: x}]
`,
			want: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app, image: "nginx:1", imagePullPolicy: IfNotPresent}]
`,
			wantPatch: `{"spec":{"template":{"spec":{"containers":[{"image":"nginx:1","imagePullPolicy":"IfNotPresent","name":"app"}]}}}}`,
		},
		{
			name: "custom resource: JSON merge patch, an atomic list is replaced",
			declared: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: 3, colors: [red, green]}
`,
			live: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: 99, colors: [blue], extra: kept}
`,
			want: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: 3, colors: [red, green], extra: kept}
`,
			wantPatch: `{"spec":{"colors":["red","green"],"size":3}}`,
		},
		{
			name: "custom resource: a same-length list of objects keeps defaults inside its items",
			declared: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {parts: [{name: a}]}
`,
			live: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {parts: [{name: a, weight: 1}]}
`,
			want: `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {parts: [{name: a, weight: 1}]}
`,
		},
		{
			name: "a removed map is restored whole",
			gvk:  schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			declared: `
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {a: "1"}
`,
			live: `
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
`,
			want: `
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {a: "1"}
`,
			wantPatch: `{"data":{"a":"1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			declaredObj := &unstructured.Unstructured{Object: obj(t, tt.declared)}
			rules := rulesFor(declaredObj.GroupVersionKind())
			if !tt.gvk.Empty() && rules.types == deducedTypes {
				t.Fatalf("no schema for %s", tt.gvk)
			}
			declared := normalize(declaredObj).Object
			live := obj(t, tt.live)
			got, err := rules.desired(live, declared)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(obj(t, tt.want), got); diff != "" {
				t.Errorf("desired (-want +got):\n%s", diff)
			}
			// holds's "yes" is final: the merge must agree, for the
			// live object and for the desired one (already as declared).
			checkHolds(t, rules, live, declared)
			checkHolds(t, rules, got, declared)
			patch, err := computePatch(live, got)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantPatch == "" {
				if patch != nil {
					t.Errorf("computePatch = %s, want no patch", patch.Data)
				}
				return
			}
			if patch == nil {
				t.Fatalf("computePatch = nil, want %s", tt.wantPatch)
			}
			if patch.Type != types.MergePatchType {
				t.Errorf("patch type = %s, want %s", patch.Type, types.MergePatchType)
			}
			var gotPatch, wantPatch any
			_ = json.Unmarshal(patch.Data, &gotPatch)
			_ = json.Unmarshal([]byte(tt.wantPatch), &wantPatch)
			if diff := cmp.Diff(wantPatch, gotPatch); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "status and nulls are dropped",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, creationTimestamp: null}\ndata: {a: '1'}\nstatus: {x: 1}\n",
			want: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n",
		},
		{
			name: "Secret stringData is folded into data as the API server does",
			in:   "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: eA==}\nstringData: {b: hello}\n",
			want: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: eA==, b: aGVsbG8=}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := normalize(&unstructured.Unstructured{Object: obj(t, tt.in)}).Object
			if diff := cmp.Diff(obj(t, tt.want), got); diff != "" {
				t.Errorf("normalize (-want +got):\n%s", diff)
			}
		})
	}
}

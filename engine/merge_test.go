package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// stored puts an object through the API types' round trip, as the API
// server stores it: quantities in canonical form, empty optional maps and
// lists dropped.
func stored(t testing.TB, y string) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj(t, y)}
	typed, err := scheme.Scheme.New(u.GroupVersionKind())
	if err != nil {
		t.Fatal(err)
	}
	data, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, typed); err != nil {
		t.Fatal(err)
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	// The typed round trip writes creationTimestamp: null.
	if m, ok := out["metadata"].(map[string]any); ok {
		delete(m, "creationTimestamp")
	}
	return dropNulls(out).(map[string]any)
}

// TestMergeByKubernetesRules holds objects of real charts, as the API
// server stores them, by the list, map and union rules of their schema.
func TestMergeByKubernetesRules(t *testing.T) {
	tests := []struct {
		name                 string
		declared, live, want string
	}{
		{
			// CoreDNS's Service: port 53 twice, keyed by port and
			// protocol. A strategic merge patch keyed by port alone
			// restored the UDP entry and left the TCP drift.
			name: "dual-protocol Service ports are matched by port and protocol",
			declared: `
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}`,
			live: `
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 10.0.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 5353}`,
			want: `
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 10.0.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}`,
		},
		{
			name: "a Deployment strategy switched to RollingUpdate goes back to Recreate alone",
			declared: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  strategy: {type: Recreate}`,
			live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}`,
			want: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  strategy: {type: Recreate}`,
		},
		{
			name: "a volume switched from configMap to secret, and an env var from value to valueFrom",
			declared: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - name: app
        image: app:1
        env: [{name: MODE, value: prod}]
      volumes: [{name: config, configMap: {name: web-config}}]`,
			live: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - name: app
        image: app:1
        imagePullPolicy: IfNotPresent
        env: [{name: MODE, valueFrom: {secretKeyRef: {name: s, key: mode}}}]
      volumes: [{name: config, secret: {secretName: web-config, defaultMode: 420}}]`,
			want: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
      - name: app
        image: app:1
        imagePullPolicy: IfNotPresent
        env: [{name: MODE, value: prod}]
      volumes: [{name: config, configMap: {name: web-config}}]`,
		},
		{
			// Tolerations are an atomic list: held whole, so an
			// operator switched to Exists cannot keep a stale value.
			name: "an atomic list is held whole",
			declared: `
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: i}]
  tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]`,
			live: `
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: i}]
  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]`,
			want: `
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: i}]
  tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]`,
		},
		{
			// An empty namespaceSelector added to a peer opens the pod
			// to every namespace. The peers are an atomic list; merged
			// by position, the lock called this in line.
			name: "a field added inside an entry of an atomic list is drift",
			declared: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]`,
			live: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}, namespaceSelector: {}}]`,
			want: `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			declared := normalize(&unstructured.Unstructured{Object: stored(t, tt.declared)})
			rules := rulesFor(declared.GroupVersionKind())
			if rules.types == deducedTypes {
				t.Fatalf("no schema for %s", declared.GroupVersionKind())
			}
			live := stored(t, tt.live)
			got, err := rules.desired(live, declared.Object)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(stored(t, tt.want), got); diff != "" {
				t.Errorf("desired (-want +got):\n%s", diff)
			}
			// The patch sent makes the live object what it must be.
			patch, err := computePatch(live, got)
			if err != nil || patch == nil {
				t.Fatalf("computePatch = %v, %v; want a patch", patch, err)
			}
			liveJSON, _ := json.Marshal(live)
			patched, err := jsonpatch.MergePatch(liveJSON, patch.Data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(stored(t, tt.want), stored(t, string(patched))); diff != "" {
				t.Errorf("live after the patch %s (-want +got):\n%s", patch.Data, diff)
			}
			// Once corrected, the object is in line.
			again, err := rules.desired(got, declared.Object)
			if err != nil {
				t.Fatal(err)
			}
			if patch, err := computePatch(got, again); err != nil || patch != nil {
				t.Errorf("after the correction: patch %v, %v; want none", patch, err)
			}
		})
	}
}

// TestNormalizedValuesAreInLine: values a real chart writes in a form the
// API server stores differently are in line once stored, and send nothing.
func TestNormalizedValuesAreInLine(t *testing.T) {
	for _, manifest := range []string{`
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, annotations: {}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}, annotations: {}}
    spec:
      nodeSelector: {}
      tolerations: []
      affinity: {}
      hostNetwork: false
      containers:
      - name: app
        image: app:1
        env: []
        args: []
        resources:
          limits: {cpu: 1000m, memory: 1024Mi}
          requests: {cpu: 0.5, memory: "134217728"}`, `
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: ClusterIP
  clusterIP: ""
  loadBalancerIP: ""
  ports: [{name: http, port: 80, targetPort: 8080}]`, `
apiVersion: v1
kind: ConfigMap
metadata: {name: empty}
data: {}`, `
apiVersion: v1
kind: Secret
metadata: {name: tls}
data:
  tls.crt: |
    LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJ
    rVENDQVRDZ0F3SUJBZ0lVYz0KLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=`,
	} {
		declared := normalize(&unstructured.Unstructured{Object: obj(t, manifest)})
		live := stored(t, manifest)
		if m, ok := live["spec"].(map[string]any); ok && declared.GetKind() == "Service" {
			// What the API server allocates and defaults.
			m["clusterIP"] = "10.0.0.7"
			m["sessionAffinity"] = "None"
			m["ports"].([]any)[0].(map[string]any)["protocol"] = "TCP"
		}
		rules := rulesFor(declared.GroupVersionKind())
		desired, err := rules.desired(live, declared.Object)
		if err != nil {
			t.Fatal(err)
		}
		if patch, err := computePatch(live, desired); err != nil || patch != nil {
			t.Errorf("%s as stored: patch %s, %v; want none", declared.GetKind(), patchData(patch), err)
		}
	}
}

func patchData(p *mergePatch) string {
	if p == nil {
		return "<nil>"
	}
	return string(p.Data)
}

// TestIgnorePointersFollowTheEntryNotTheIndex: an ignore rule's list index
// counts the declared list; a container prepended live must not take the
// ignored field of the container it displaced.
func TestIgnorePointersFollowTheEntryNotTheIndex(t *testing.T) {
	declared := normalize(&unstructured.Unstructured{Object: obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app, image: "app:1"}]`)})
	live := stored(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: debug, image: busybox}, {name: app, image: "app:2"}]`)
	ignore, err := ParsePointer("/spec/template/spec/containers/0/image")
	if err != nil {
		t.Fatal(err)
	}
	rules := rulesFor(declared.GroupVersionKind())
	keyed := rules.keyed(declared.Object, []Pointer{ignore})
	o := &lockedObject{extras: &declaredExtras{ignore: keyed}}
	got, err := o.desired(rules, live, declared.Object)
	if err != nil {
		t.Fatal(err)
	}
	want := stored(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app, image: "app:2"}]`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("desired (-want +got):\n%s", diff)
	}
}

func TestRestores(t *testing.T) {
	live := map[string]any{"data": map[string]any{"a": "1"}, "list": []any{"x"}}
	tests := []struct {
		desired map[string]any
		paths   []string
		want    bool
	}{
		{map[string]any{"data": map[string]any{"a": "2"}, "list": []any{"x"}}, []string{"/data/a"}, false},
		{map[string]any{"data": map[string]any{"a": "1", "b": "2"}, "list": []any{"x"}}, []string{"/data/b"}, true},
		{map[string]any{"data": map[string]any{"a": "1"}, "list": []any{"x", "y"}}, []string{"/list"}, true},
		{map[string]any{"data": map[string]any{}, "list": []any{"x"}}, []string{"/data/a"}, false},
	}
	for _, tt := range tests {
		if got := restores(live, tt.desired, tt.paths); got != tt.want {
			t.Errorf("restores(%v, %v) = %v, want %v", tt.desired, tt.paths, got, tt.want)
		}
	}
}

// rulesFor returns the rules an engine without an OpenAPI client holds
// gvk's objects by.
func rulesFor(gvk schema.GroupVersionKind) mergeRules {
	return newSchemas(nil, time.Now).rules(gvk.GroupVersion())
}

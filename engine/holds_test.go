package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// checkHolds fails t if holds says live is as declared and the full merge
// does not agree. It reports whether holds said so.
func checkHolds(t testing.TB, rules mergeRules, live, declared map[string]any) bool {
	t.Helper()
	if !rules.holds(live, declared) {
		return false
	}
	desired, err := rules.desired(live, declared)
	if err != nil {
		// The merge cannot read a live object its schema does not
		// describe, such as one with a field newer than the schema;
		// holds reads only what is declared, and that is as declared.
		if _, terr := rules.types.ObjectToTyped(&unstructured.Unstructured{Object: live}); terr == nil {
			t.Fatalf("holds, but the merge failed: %v", err)
		}
		return true
	}
	if !reflect.DeepEqual(desired, live) {
		t.Fatalf("holds, but the merge changes the live object:\nlive    %v\ndesired %v", live, desired)
	}
	return true
}

// chartDeployment is what the `helm create` chart's Deployment template
// renders with its default values, apart from the container's empty
// securityContext, which the API server does not store (the full merge
// and a dry run handle that).
const chartDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-fpchart
  labels:
    helm.sh/chart: fpchart-0.1.0
    app.kubernetes.io/name: fpchart
    app.kubernetes.io/instance: web
    app.kubernetes.io/version: "1.16.0"
    app.kubernetes.io/managed-by: Helm
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: fpchart
      app.kubernetes.io/instance: web
  template:
    metadata:
      labels:
        helm.sh/chart: fpchart-0.1.0
        app.kubernetes.io/name: fpchart
        app.kubernetes.io/instance: web
        app.kubernetes.io/version: "1.16.0"
        app.kubernetes.io/managed-by: Helm
    spec:
      serviceAccountName: web-fpchart
      securityContext: {}
      containers:
        - name: fpchart
          image: "nginx:1.16.0"
          imagePullPolicy: IfNotPresent
          ports:
            - name: http
              containerPort: 80
              protocol: TCP
          livenessProbe:
            httpGet: {path: /, port: http}
          readinessProbe:
            httpGet: {path: /, port: http}
          resources: {}
`

// storedDeployment is chartDeployment as kube-apiserver v1.36 stored it
// after a Helm 4 install and a status write (informers' fixture).
func storedDeployment(t testing.TB) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../informers/testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	return obj(t, string(data)) // JSON is YAML
}

var deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// TestHolds: holds finds the objects the API server stores as declared,
// where the full merge agrees, and is not sure wherever the merge would
// change something, or might.
func TestHolds(t *testing.T) {
	rules := rulesFor(deploymentGVK)
	declared := normalize(&unstructured.Unstructured{Object: obj(t, chartDeployment)}).Object
	container := func(live map[string]any) map[string]any {
		return live["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	}
	tests := []struct {
		name     string
		declared func(d map[string]any)
		edit     func(live map[string]any)
		// want is holds's answer; merged is the full merge's.
		want, merged bool
	}{
		{name: "as the API server stored it", want: true, merged: true},
		{
			name: "another controller's label and the status",
			edit: func(l map[string]any) {
				l["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "x"
				l["status"] = map[string]any{"replicas": int64(3)}
			},
			want: true, merged: true,
		},
		{
			name: "a held scalar changed",
			edit: func(l map[string]any) { container(l)["image"] = "nginx:2" },
		},
		{
			name: "a held field removed",
			edit: func(l map[string]any) { delete(container(l), "readinessProbe") },
		},
		{
			name: "an entry added to a map list",
			edit: func(l map[string]any) {
				c := container(l)
				c["ports"] = append(c["ports"].([]any), map[string]any{"name": "debug", "containerPort": int64(9000), "protocol": "TCP"})
			},
		},
		{
			name: "another member of a union beside the declared one",
			edit: func(l map[string]any) {
				container(l)["livenessProbe"].(map[string]any)["exec"] = map[string]any{"command": []any{"true"}}
			},
		},
		{
			name:     "the rolling update of a strategy declared Recreate",
			declared: func(d map[string]any) { d["spec"].(map[string]any)["strategy"] = map[string]any{"type": "Recreate"} },
			edit:     func(l map[string]any) { l["spec"].(map[string]any)["strategy"].(map[string]any)["type"] = "Recreate" },
		},
		{
			name:     "a number of another Go type",
			declared: func(d map[string]any) { d["spec"].(map[string]any)["replicas"] = float64(1) },
		},
		{
			name: "a list key left to its default",
			declared: func(d map[string]any) {
				delete(container(d)["ports"].([]any)[0].(map[string]any), "protocol")
			},
			want: true, merged: true,
		},
		{
			name: "a list key left to its default, live with another value",
			declared: func(d map[string]any) {
				delete(container(d)["ports"].([]any)[0].(map[string]any), "protocol")
			},
			edit: func(l map[string]any) { container(l)["ports"].([]any)[0].(map[string]any)["protocol"] = "UDP" },
		},
		{
			name:     "a field the schema does not know: not sure",
			declared: func(d map[string]any) { d["spec"].(map[string]any)["futureField"] = "x" },
			edit:     func(l map[string]any) { l["spec"].(map[string]any)["futureField"] = "x" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := runtime.DeepCopyJSON(declared)
			if tt.declared != nil {
				tt.declared(d)
			}
			live := storedDeployment(t)
			if tt.edit != nil {
				tt.edit(live)
			}
			if got := checkHolds(t, rules, live, d); got != tt.want {
				t.Errorf("holds = %v, want %v", got, tt.want)
			}
			desired, err := rules.desired(live, d)
			if err != nil {
				t.Fatal(err)
			}
			if merged := reflect.DeepEqual(desired, live); merged != tt.merged {
				t.Errorf("the full merge finds it in line: %v, want %v", merged, tt.merged)
			}
		})
	}
}

// TestHoldsAtomic: an atomic map or list is held whole, so an entry only
// the live object has is not as declared.
func TestHoldsAtomic(t *testing.T) {
	rules := rulesFor(serviceGVK)
	declared := normalize(&unstructured.Unstructured{Object: obj(t, `
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
`)}).Object
	live := obj(t, `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
  clusterIP: 10.0.0.1
  clusterIPs: [10.0.0.1]
  type: ClusterIP
  sessionAffinity: None
`)
	if !checkHolds(t, rules, live, declared) {
		t.Fatal("holds = false for a Service as stored")
	}
	live["spec"].(map[string]any)["selector"].(map[string]any)["tier"] = "x"
	if checkHolds(t, rules, live, declared) {
		t.Error("holds = true with a key added to the atomic selector")
	}
}

// TestHoldsNeverWrong changes the stored Deployment at random, many times
// over, and checks that whenever holds says it is as declared, the full
// merge agrees.
func TestHoldsNeverWrong(t *testing.T) {
	rules := rulesFor(deploymentGVK)
	declared := normalize(&unstructured.Unstructured{Object: obj(t, chartDeployment)}).Object
	r := rand.New(rand.NewPCG(1, 2))
	yes, agreed := 0, 0
	for i := range 2000 {
		live := storedDeployment(t)
		for range 1 + r.IntN(3) {
			mutate(r, live)
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if checkHolds(t, rules, live, declared) {
				yes++
				if _, err := rules.desired(live, declared); err == nil {
					agreed++
				}
			}
		})
	}
	// The mutations that touch nothing held (a label, a field the
	// declaration leaves alone) leave some objects as declared; a walk
	// that never says yes would pass the check above.
	if agreed == 0 {
		t.Error("holds never said yes where the merge could check it")
	}
	t.Logf("holds said yes for %d of 2000, %d of them checked by the merge", yes, agreed)
}

// mutate makes one random change somewhere in v: a scalar set, a key
// removed or added, a list entry changed or swapped.
func mutate(r *rand.Rand, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same changes every run
		if len(keys) == 0 {
			v["added"] = "x"
			return
		}
		k := keys[r.IntN(len(keys))]
		switch r.IntN(6) {
		case 0:
			delete(v, k)
		case 1:
			v[k+"x"] = "x"
		case 2:
			v[k] = "changed"
		default:
			if _, ok := v[k].(map[string]any); ok {
				mutate(r, v[k])
				return
			}
			if _, ok := v[k].([]any); ok {
				mutate(r, v[k])
				return
			}
			v[k] = int64(r.IntN(3))
		}
	case []any:
		if len(v) == 0 {
			return
		}
		i := r.IntN(len(v))
		switch r.IntN(4) {
		case 0:
			v[i] = "changed"
		case 1:
			v[0], v[i] = v[i], v[0]
		default:
			mutate(r, v[i])
		}
	}
}

// TestSameJSON: sameJSON is reflect.DeepEqual on decoded JSON.
func TestSameJSON(t *testing.T) {
	values := []any{
		nil, "a", "b", true, false, int64(1), int64(2), float64(1), 1,
		map[string]any{}, map[string]any(nil), map[string]any{"a": int64(1)}, map[string]any{"a": float64(1)}, map[string]any{"b": int64(1)},
		[]any{}, []any(nil), []any{"a"}, []any{"a", "b"}, []any{"b", "a"}, []any{map[string]any{"a": nil}},
		map[string]any{"x": []any{map[string]any{"a": "b"}}}, map[string]any{"x": []any{map[string]any{"a": "c"}}},
	}
	for _, a := range values {
		for _, b := range values {
			if got, want := sameJSON(a, b), reflect.DeepEqual(a, b); got != want {
				t.Errorf("sameJSON(%#v, %#v) = %v, want %v", a, b, got, want)
			}
		}
	}
}

// TestHoldsByServedRules reads a custom resource by the rules its CRD's
// document gives, as the locker does once it has read them: its atomic
// selector is held whole, its map list by the CRD's keys.
func TestHoldsByServedRules(t *testing.T) {
	rules := servedGizmoRules(t)
	declared, live := obj(t, gizmoDeclared), obj(t, gizmoStored)
	// Twice: the second reads the kind's root type from the cache.
	for range 2 {
		if !checkHolds(t, rules, live, declared) {
			t.Fatal("holds = false for a Gizmo as declared, defaults and others' fields beside")
		}
	}
	live["spec"].(map[string]any)["selector"].(map[string]any)["tier"] = "x"
	if checkHolds(t, rules, live, declared) {
		t.Error("holds = true with a key added to the atomic selector")
	}
}

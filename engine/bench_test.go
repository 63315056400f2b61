package engine

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const benchDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx:1
        ports: [{name: http, containerPort: 80, protocol: TCP}]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
`

const benchLive = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, resourceVersion: "42", labels: {app: web, team: x}}
spec:
  replicas: 5
  progressDeadlineSeconds: 600
  revisionHistoryLimit: 10
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx:2
        imagePullPolicy: IfNotPresent
        terminationMessagePath: /dev/termination-log
        ports: [{name: http, containerPort: 80, protocol: TCP}, {name: debug, containerPort: 9000, protocol: TCP}]
        env: [{name: A, value: "1"}, {name: B, value: "3"}]
      restartPolicy: Always
      dnsPolicy: ClusterFirst
`

// BenchmarkRevertPatch is the per-event hot path: the desired state of a
// drifted Deployment and the patch that restores it.
func BenchmarkRevertPatch(b *testing.B) {
	declared := normalize(&unstructured.Unstructured{Object: obj(b, benchDeployment)}).Object
	live := obj(b, benchLive)
	rules := rulesFor(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	b.ReportAllocs()
	for b.Loop() {
		desired, err := rules.desired(live, declared)
		if err != nil {
			b.Fatal(err)
		}
		if patch, err := computePatch(live, desired); err != nil || patch == nil {
			b.Fatal(err, patch)
		}
	}
}

// BenchmarkInLineCheck is the cost of an event on an object that is as
// declared: no patch.
func BenchmarkInLineCheck(b *testing.B) {
	declared := normalize(&unstructured.Unstructured{Object: obj(b, benchDeployment)}).Object
	rules := rulesFor(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	live, err := rules.desired(obj(b, benchLive), declared)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		desired, err := rules.desired(live, declared)
		if err != nil {
			b.Fatal(err)
		}
		if patch, err := computePatch(live, desired); err != nil || patch != nil {
			b.Fatal(err, patch)
		}
	}
}

// BenchmarkInLine is the check of a chart's Deployment as the API server
// stored it, which is as declared: by holds, and by the full merge it
// spares. BenchmarkInLineCheck times the merge and its patch on a smaller
// Deployment, as before holds.
func BenchmarkInLine(b *testing.B) {
	declared := normalize(&unstructured.Unstructured{Object: obj(b, chartDeployment)}).Object
	live := storedDeployment(b)
	rules := rulesFor(deploymentGVK)
	o := &lockedObject{}
	b.Run("holds", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !rules.holds(live, declared) {
				b.Fatal("not as declared")
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if desired, err := o.desired(rules, live, declared); err != nil || !reflect.DeepEqual(desired, live) {
				b.Fatal("not as declared", err)
			}
		}
	})
}

// benchConfigMap is a chart's ConfigMap of a config file, as the bench's
// releases have them.
const benchConfigMap = `
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: ns
  labels: {app.kubernetes.io/name: web, app.kubernetes.io/instance: web, app.kubernetes.io/managed-by: Helm, helm.sh/chart: web-1.2.3}
  annotations: {meta.helm.sh/release-name: web, meta.helm.sh/release-namespace: ns}
data:
  app.yaml: |
    server:
      port: 8080
      timeout: 30s
    log: {level: info, format: json}
  LOG_LEVEL: info
`

// BenchmarkNormalize is what resolving costs an object before its
// declaration is packed: nulls dropped, and the API types' round trip
// (storedForm), or for a ConfigMap, stringForm in its place. "round trip"
// is the same ConfigMap the long way, for the ratio in one run.
func BenchmarkNormalize(b *testing.B) {
	for _, bench := range []struct {
		name      string
		in        string
		normalize func(*unstructured.Unstructured)
	}{
		{"Deployment", chartDeployment, func(u *unstructured.Unstructured) { normalize(u) }},
		{"ConfigMap", benchConfigMap, func(u *unstructured.Unstructured) { normalize(u) }},
		{"ConfigMap round trip", benchConfigMap, func(u *unstructured.Unstructured) {
			storedForm(&unstructured.Unstructured{Object: dropNulls(u.Object).(map[string]any)})
		}},
	} {
		declared := obj(b, bench.in)
		b.Run(bench.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bench.normalize(&unstructured.Unstructured{Object: declared})
			}
		})
	}
}

// BenchmarkHeldMemory is the engine's live heap for each object it holds,
// measured after a garbage collection, for sets of 50 objects as the
// bench's releases are: half Deployments, half ConfigMaps. The informers'
// share is not in it. It is read before the first Sync, so every object
// is in its set's dirty map too (about 120 bytes of it), as at a cold
// lock's peak.
func BenchmarkHeldMemory(b *testing.B) {
	const sets, objects = 200, 50
	deployment, configMap := obj(b, benchDeployment), obj(b, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {app: web}}\ndata: {key: declared}\n")
	var perObject, inUse float64
	for b.Loop() {
		before, beforeInUse := liveHeap()
		e, _, _ := newTestEngine(b)
		for s := range sets {
			set := ObjectSet{DefaultNamespace: fmt.Sprintf("ns-%d", s)}
			for i := range objects {
				o := &unstructured.Unstructured{Object: k8sruntime.DeepCopyJSON(configMap)}
				if i%2 == 0 {
					o = &unstructured.Unstructured{Object: k8sruntime.DeepCopyJSON(deployment)}
				}
				o.SetName(fmt.Sprintf("r%d-%d", s, i))
				set.Objects = append(set.Objects, o)
			}
			e.Declare(fmt.Sprintf("k%d", s), set)
		}
		e.Prepare(context.Background())
		after, afterInUse := liveHeap()
		perObject, inUse = float64(after-before)/(sets*objects), float64(afterInUse-beforeInUse)/(sets*objects)
		runtime.KeepAlive(e)
	}
	b.ReportMetric(perObject, "live-B/object")
	b.ReportMetric(inUse, "inuse-B/object")
}

// liveHeap is the heap's live bytes after a garbage collection, and the
// bytes of the spans they are in. It collects twice: what sync.Pools hold,
// such as a deflater of a megabyte, survives one collection.
func liveHeap() (live, inUse uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapInuse
}

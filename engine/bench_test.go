package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

func doc(t *testing.T, y string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// dnsService is a chart's Service with port 53 on UDP and TCP: two entries,
// keyed by port and protocol.
var dnsService = fixture{
	gvr: schema.GroupVersionResource{Version: "v1", Resource: "services"},
	manifest: `
apiVersion: v1
kind: Service
metadata: {name: dns, labels: {app: dns}}
spec:
  selector: {app: dns}
  ports:
  - {name: dns-udp, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
`,
	stored: `
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: ns, uid: 0b5e3c1a-7d2f-4c4e-9a53-2f0d3e6b5a53, creationTimestamp: "2026-01-02T03:00:00Z", labels: {app: dns}}
spec:
  selector: {app: dns}
  ports:
  - {name: dns-udp, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  clusterIP: 10.0.0.53
  clusterIPs: [10.0.0.53]
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  sessionAffinity: None
  type: ClusterIP
`,
}

// webDeployment is a chart's Deployment with named container ports, keyed
// by containerPort and protocol, and env vars, keyed by name.
var webDeployment = fixture{
	gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
	manifest: `
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
      - name: web
        image: nginx:1.27
        ports:
        - {name: http, containerPort: 8080, protocol: TCP}
        - {name: metrics, containerPort: 9090, protocol: TCP}
        env:
        - {name: LOG_LEVEL, value: info}
        - {name: MODE, value: prod}
`,
	stored: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, uid: 5f1c9e2b-3a4d-4e6f-8b7a-0c9d8e7f6a5b, generation: 1, creationTimestamp: "2026-01-02T03:00:00Z", labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  progressDeadlineSeconds: 600
  revisionHistoryLimit: 10
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - {name: http, containerPort: 8080, protocol: TCP}
        - {name: metrics, containerPort: 9090, protocol: TCP}
        env:
        - {name: LOG_LEVEL, value: info}
        - {name: MODE, value: prod}
        imagePullPolicy: IfNotPresent
        resources: {}
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      schedulerName: default-scheduler
      securityContext: {}
      terminationGracePeriodSeconds: 30
`,
}

// TestDriftAttribution edits objects stored as the API server stores them,
// with metadata.managedFields recorded by the API server's own field
// manager code, and checks what the drift is put down to: exactly the
// fields that changed, with list entries named by their keys, and only
// the other managers that changed them, never the engine's own, whatever
// it owns.
func TestDriftAttribution(t *testing.T) {
	tcp53 := `/spec/ports/{"port":53,"protocol":"TCP"}`
	udp53 := `/spec/ports/{"port":53,"protocol":"UDP"}`
	container := `/spec/template/spec/containers/{"name":"web"}`
	tests := []struct {
		name    string
		object  fixture
		helm    metav1.ManagedFieldsOperationType // Update: Helm 3; Apply: Helm 4
		locker  string                            // Options.FieldManager
		history []write                           // after Helm's install, dated at(1), at(2)...
		paths   []string
		who     []Manager
	}{
		{
			name:   "Helm 3: kubectl edit changes again the TCP targetPort the locker restored",
			object: dnsService, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-patch", patch: `[{"op":"replace","path":"/spec/ports/1/targetPort","value":5353},{"op":"replace","path":"/spec/ports/1/name","value":"alt"}]`},
				// The locker's restore: it owns the entry's name, the
				// changed field's neighbour, from now on.
				{manager: DefaultFieldManager, patch: `[{"op":"replace","path":"/spec/ports/1/targetPort","value":53},{"op":"replace","path":"/spec/ports/1/name","value":"dns-tcp"}]`},
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/ports/1/targetPort","value":5300}]`},
			},
			paths: []string{tcp53 + "/targetPort"},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(3)}},
		},
		{
			name:   "Helm 4: the locker's manager shares the changed field and wrote last",
			object: dnsService, helm: metav1.ManagedFieldsOperationApply,
			history: []write{
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/ports/1/targetPort","value":5353}]`},
				// An apply of the same value shares the field.
				{manager: DefaultFieldManager, apply: `spec: {ports: [{port: 53, protocol: TCP, targetPort: 5353}]}`},
			},
			paths: []string{tcp53 + "/targetPort"},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(1)}},
		},
		{
			name:   "Helm 4, the locker under another name: kubectl edit changes the UDP targetPort it restored",
			object: dnsService, helm: metav1.ManagedFieldsOperationApply, locker: "release-locker",
			history: []write{
				{manager: "kubectl-patch", patch: `[{"op":"replace","path":"/spec/ports/0/targetPort","value":5353},{"op":"replace","path":"/spec/ports/0/name","value":"alt"}]`},
				{manager: "release-locker", patch: `[{"op":"replace","path":"/spec/ports/0/targetPort","value":53},{"op":"replace","path":"/spec/ports/0/name","value":"dns-udp"}]`},
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/ports/0/targetPort","value":5300}]`},
			},
			paths: []string{udp53 + "/targetPort"},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(3)}},
		},
		{
			name:   "Helm 3: kubectl edit moves the TCP entry first and changes its targetPort",
			object: dnsService, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-edit", patch: `[{"op":"move","from":"/spec/ports/1","path":"/spec/ports/0"},{"op":"replace","path":"/spec/ports/0/targetPort","value":5353}]`},
			},
			paths: []string{tcp53 + "/targetPort"},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(1)}},
		},
		{
			// The locker's correction of the label, computed before
			// kubectl's edit, lands after it: its manager wrote last.
			name:   "Helm 3: kubectl edit changes the TCP port number; the locker wrote since",
			object: dnsService, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-label", patch: `[{"op":"remove","path":"/metadata/labels/app"}]`},
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/ports/1/port","value":5353}]`},
				{manager: DefaultFieldManager, patch: `[{"op":"add","path":"/metadata/labels","value":{"app":"dns"}}]`},
			},
			// A key changed: the declared entry is gone, another came.
			paths: []string{tcp53, `/spec/ports/{"port":5353,"protocol":"TCP"}`},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(2)}},
		},
		{
			name:   "Helm 4: kubectl patch adds a port",
			object: dnsService, helm: metav1.ManagedFieldsOperationApply,
			history: []write{
				{manager: "kubectl-patch", patch: `[{"op":"add","path":"/spec/ports/-","value":{"name":"alt","port":8053,"protocol":"TCP","targetPort":8053}}]`},
			},
			paths: []string{`/spec/ports/{"port":8053,"protocol":"TCP"}`},
			who:   []Manager{{Name: "kubectl-patch", Operation: "Update", Time: at(1)}},
		},
		{
			name:   "Helm 4: kubectl patch changes an env var; another manager wrote since",
			object: webDeployment, helm: metav1.ManagedFieldsOperationApply,
			history: []write{
				{manager: "kubectl-patch", patch: `[{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value","value":"debug"}]`},
				// A label the chart does not declare is no drift; its
				// writer is the latest, but owns nothing that drifted.
				{manager: "kubectl-label", patch: `[{"op":"add","path":"/metadata/labels/tier","value":"web"}]`},
			},
			paths: []string{container + `/env/{"name":"LOG_LEVEL"}/value`},
			who:   []Manager{{Name: "kubectl-patch", Operation: "Update", Time: at(1)}},
		},
		{
			name:   "Helm 4: kubectl edit moves an env var first and changes it",
			object: webDeployment, helm: metav1.ManagedFieldsOperationApply,
			history: []write{
				{manager: "kubectl-edit", patch: `[{"op":"move","from":"/spec/template/spec/containers/0/env/1","path":"/spec/template/spec/containers/0/env/0"},{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value","value":"dev"}]`},
			},
			paths: []string{container + `/env/{"name":"MODE"}/value`},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(1)}},
		},
		{
			name:   "Helm 3: kubectl edit adds an env var beside one the locker restored",
			object: webDeployment, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-patch", patch: `[{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value","value":"debug"}]`},
				{manager: DefaultFieldManager, patch: `[{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value","value":"info"}]`},
				{manager: "kubectl-edit", patch: `[{"op":"add","path":"/spec/template/spec/containers/0/env/0","value":{"name":"DEBUG","value":"1"}}]`},
			},
			paths: []string{container + `/env/{"name":"DEBUG"}`},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(3)}},
		},
		{
			name:   "Helm 3: kubectl edit renames a container port",
			object: webDeployment, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/template/spec/containers/0/ports/1/name","value":"prom"}]`},
			},
			paths: []string{container + `/ports/{"containerPort":9090,"protocol":"TCP"}/name`},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(1)}},
		},
		{
			name:   "Helm 3: kubectl edit changes a container port number",
			object: webDeployment, helm: metav1.ManagedFieldsOperationUpdate,
			history: []write{
				{manager: "kubectl-edit", patch: `[{"op":"replace","path":"/spec/template/spec/containers/0/ports/0/containerPort","value":8081}]`},
			},
			paths: []string{container + `/ports/{"containerPort":8080,"protocol":"TCP"}`, container + `/ports/{"containerPort":8081,"protocol":"TCP"}`},
			who:   []Manager{{Name: "kubectl-edit", Operation: "Update", Time: at(1)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngineWith(t, Options{FieldManager: tt.locker})
			installed := install(t, tt.object, tt.helm)
			if _, err := client.Resource(tt.object.gvr).Namespace("ns").Create(ctx, installed, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			manifest := &unstructured.Unstructured{Object: obj(t, tt.object.manifest)}
			e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{manifest}, DefaultNamespace: "ns"})
			if res, err := e.Sync(ctx, "k"); err != nil || !res.InLine || len(res.Drifts) != 0 {
				t.Fatalf("Sync of the object as installed = %+v, %v; want in line", res, err)
			}

			edited := replay(t, installed, tt.history)
			if _, err := client.Resource(tt.object.gvr).Namespace("ns").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			e.onEvent(tt.object.gvr, edited)
			res, err := e.Sync(ctx, "k")
			if err != nil || len(res.Drifts) != 1 || !res.Drifts[0].Corrected {
				t.Fatalf("Sync after the edit = %+v, %v; want one corrected drift", res, err)
			}
			if diff := cmp.Diff(tt.paths, res.Drifts[0].Paths); diff != "" {
				t.Errorf("drifted paths (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.who, res.Drifts[0].Managers); diff != "" {
				t.Errorf("managers (-want +got):\n%s\nmanagedFields: %s", diff, managedFieldsJSON(edited))
			}
		})
	}
}

// TestDriftPathsServeAsIgnoreRules checks that a drift's keyed paths, which
// a fight's message offers as spec.ignore paths, ignore those fields.
func TestDriftPathsServeAsIgnoreRules(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	installed := install(t, dnsService, metav1.ManagedFieldsOperationApply)
	if _, err := client.Resource(dnsService.gvr).Namespace("ns").Create(ctx, installed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kubectl edit moves the TCP entry first, so that an index would
	// name another entry in the declaration than live.
	edited := replay(t, installed, []write{{manager: "kubectl-edit", patch: `[{"op":"move","from":"/spec/ports/1","path":"/spec/ports/0"},{"op":"replace","path":"/spec/ports/0/targetPort","value":5353}]`}})
	if _, err := client.Resource(dnsService.gvr).Namespace("ns").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ignored []Pointer
	for _, text := range []string{`/spec/ports/{"port":53,"protocol":"TCP"}/targetPort`} {
		p, err := ParsePointer(text)
		if err != nil {
			t.Fatal(err)
		}
		ignored = append(ignored, p)
	}
	manifest := &unstructured.Unstructured{Object: obj(t, dnsService.manifest)}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{manifest}, DefaultNamespace: "ns",
		Ignore: func(*unstructured.Unstructured) []Pointer { return ignored }})
	res, err := e.Sync(ctx, "k")
	if err != nil || len(res.Drifts) != 1 {
		t.Fatalf("Sync = %+v, %v; want the order put back", res, err)
	}
	got, err := client.Resource(dnsService.gvr).Namespace("ns").Get(ctx, "dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports, _, _ := unstructured.NestedSlice(got.Object, "spec", "ports")
	want := []any{
		map[string]any{"name": "dns-udp", "port": int64(53), "protocol": "UDP", "targetPort": int64(53)},
		map[string]any{"name": "dns-tcp", "port": int64(53), "protocol": "TCP", "targetPort": int64(5353)},
	}
	if diff := cmp.Diff(want, ports); diff != "" {
		t.Errorf("ports (-want +got): the TCP targetPort must stay as edited, the rest as declared\n%s", diff)
	}
}

// fixture is an object as a chart declares it and as the API server stores
// it once created: with the fields it defaults and allocates.
type fixture struct {
	gvr      schema.GroupVersionResource
	manifest string
	stored   string
}

// write is one write to an object by a field manager: an Update with an
// RFC 6902 patch, as kubectl edit and kubectl patch make, or a server-side
// apply of a partial object.
type write struct {
	manager string
	patch   string
	apply   string
}

// at dates the nth write of a test's history; Helm's install is the 0th.
func at(n int) time.Time { return time.Date(2026, 1, 2, 3, n, 0, 0, time.UTC) }

// install creates f as Helm does: Helm 3 with an Update, owning what the
// API server defaulted too, and Helm 4 with a server-side apply of the
// manifest, owning only that.
func install(t *testing.T, f fixture, op metav1.ManagedFieldsOperationType) *unstructured.Unstructured {
	t.Helper()
	stored := &unstructured.Unstructured{Object: obj(t, f.stored)}
	fm := managedfieldstest.NewFakeFieldManager(builtinTypes(), stored.GroupVersionKind())
	empty := &unstructured.Unstructured{}
	empty.SetGroupVersionKind(stored.GroupVersionKind())
	var out runtime.Object
	var err error
	if op == metav1.ManagedFieldsOperationApply {
		manifest := &unstructured.Unstructured{Object: obj(t, f.manifest)}
		manifest.SetNamespace(stored.GetNamespace())
		out, err = fm.Apply(empty, manifest, "helm", false)
	} else {
		out, err = fm.Update(empty, stored.DeepCopy(), "helm")
	}
	if err != nil {
		t.Fatal(err)
	}
	stored.SetManagedFields(out.(metav1.Object).GetManagedFields())
	dated(stored, "helm", op, at(0))
	return roundTrip(t, stored)
}

// replay makes writes to obj in turn, with the API server's field manager
// keeping managedFields, and dates the nth at(n).
func replay(t *testing.T, obj *unstructured.Unstructured, writes []write) *unstructured.Unstructured {
	t.Helper()
	fm := managedfieldstest.NewFakeFieldManager(builtinTypes(), obj.GroupVersionKind())
	live := obj
	for i, w := range writes {
		var out runtime.Object
		var err error
		op := metav1.ManagedFieldsOperationUpdate
		if w.apply != "" {
			op = metav1.ManagedFieldsOperationApply
			applied := &unstructured.Unstructured{Object: doc(t, w.apply)}
			applied.SetGroupVersionKind(live.GroupVersionKind())
			applied.SetNamespace(live.GetNamespace())
			applied.SetName(live.GetName())
			out, err = fm.Apply(live, applied, w.manager, true)
		} else {
			var next *unstructured.Unstructured
			if next, err = jsonPatched(live, w.patch); err == nil {
				out, err = fm.Update(live, next, w.manager)
			}
		}
		if err != nil {
			t.Fatalf("write %d by %s: %v", i+1, w.manager, err)
		}
		live = out.(*unstructured.Unstructured)
		dated(live, w.manager, op, at(i+1))
		live = roundTrip(t, live)
	}
	return live
}

func jsonPatched(obj *unstructured.Unstructured, patch string) (*unstructured.Unstructured, error) {
	p, err := jsonpatch.DecodePatch([]byte(patch))
	if err != nil {
		return nil, err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if data, err = p.Apply(data); err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{}
	return out, out.UnmarshalJSON(data)
}

// dated sets the time of manager's op entry in obj's managedFields: the
// API server's field manager takes the time it runs at.
func dated(obj *unstructured.Unstructured, manager string, op metav1.ManagedFieldsOperationType, when time.Time) {
	fields := obj.GetManagedFields()
	for i := range fields {
		if fields[i].Manager == manager && fields[i].Operation == op {
			fields[i].Time = &metav1.Time{Time: when}
		}
	}
	obj.SetManagedFields(fields)
}

// roundTrip puts obj through its API type, as the API server stores it.
func roundTrip(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	typed, err := scheme.Scheme.New(obj.GroupVersionKind())
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
		t.Fatal(err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func managedFieldsJSON(obj *unstructured.Unstructured) string {
	data, _ := json.Marshal(obj.GetManagedFields())
	return string(data)
}

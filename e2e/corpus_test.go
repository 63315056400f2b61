package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

// corpusObject is one object of a locked chart, addressed on the API
// server.
type corpusObject struct {
	kind      string
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

func (o corpusObject) String() string { return o.kind + " " + o.namespace + "/" + o.name }

func (o corpusObject) get(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	return env.Get(t, o.gvr.GroupVersion().String(), o.gvr.Resource, o.namespace, o.name)
}

func (o corpusObject) patch(t *testing.T, pt types.PatchType, patch string) {
	t.Helper()
	r := env.Dynamic.Resource(o.gvr)
	var err error
	if o.namespace == "" {
		_, err = r.Patch(t.Context(), o.name, pt, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"})
	} else {
		_, err = r.Namespace(o.namespace).Patch(t.Context(), o.name, pt, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"})
	}
	if err != nil {
		t.Fatalf("patching %s: %v", o, err)
	}
}

func (o corpusObject) delete(t *testing.T) {
	t.Helper()
	r := env.Dynamic.Resource(o.gvr)
	var err error
	if o.namespace == "" {
		err = r.Delete(t.Context(), o.name, metav1.DeleteOptions{})
	} else {
		err = r.Namespace(o.namespace).Delete(t.Context(), o.name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatalf("deleting %s: %v", o, err)
	}
}

// releaseObjects reads the release's manifest as helm CLI v stored it and
// addresses its objects, the namespace of namespaced ones defaulted as
// Helm does.
func releaseObjects(t *testing.T, v framework.HelmVersion, ns, release string) []corpusObject {
	t.Helper()
	objs, err := manifest.ParseRelease(env.Helm(t, v, "get", "manifest", release, "-n", ns), helmOf(v))
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Kube.Discovery()))
	var out []corpusObject
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("mapping %s: %v", gvk, err)
		}
		obj := corpusObject{kind: gvk.Kind, gvr: m.Resource, name: o.GetName()}
		if m.Scope.Name() == "namespace" {
			obj.namespace = ns
			if o.GetNamespace() != "" {
				obj.namespace = o.GetNamespace()
			}
		}
		out = append(out, obj)
	}
	return out
}

// lockerWrote returns the objects the locker has written, by their
// managedFields; Helm 4's are handed back to Helm's manager after a
// correction, so the CR's counters are checked too.
func lockerWrote(t *testing.T, objs []corpusObject) []string {
	t.Helper()
	var wrote []string
	for _, o := range objs {
		live := o.get(t)
		if live == nil {
			t.Fatalf("%s does not exist", o)
		}
		for _, f := range live.GetManagedFields() {
			if f.Manager == engine.DefaultFieldManager {
				wrote = append(wrote, o.String())
			}
		}
	}
	return wrote
}

// noDrift fails unless the CR counts no drift and has recorded no drift
// event.
func noDrift(t *testing.T, cr, when string) {
	t.Helper()
	hr := env.HelmRelease(t, cr)
	if hr.Status.DriftsDetected != 0 || hr.Status.DriftsCorrected != 0 {
		t.Errorf("%s: %d drifts detected, %d corrected (last: %+v); want none", when, hr.Status.DriftsDetected, hr.Status.DriftsCorrected, hr.Status.LastDrift)
	}
	for _, ev := range env.Events(t, framework.RegistrationNamespace, cr) {
		if strings.HasPrefix(ev.Reason, "Drift") || ev.Reason == "Fighting" {
			t.Errorf("%s: event %s: %s", when, ev.Reason, ev.Message)
		}
	}
}

// TestRealChartCorpus locks a chart written the way widely used charts are
// (e2e/testdata/charts/webstack: 30 objects of 19 kinds) with each helm
// CLI, on objects as the API server stores them, and checks what a lock
// must do on real charts: lock without writing, ignore unrelated changes,
// revert an edit and recreate a deletion of every kind, match Service ports
// by port and protocol, hold atomic lists and unions, and lock the next
// revision.
func TestRealChartCorpus(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			release := "corpus-" + v.String()
			chart := framework.Chart(t, "webstack")
			env.Helm(t, v, "install", release, chart, "-n", ns)
			cr := env.Register(t, ns, release)
			hr := env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("Locked = %+v, want True", c)
			}
			objs := releaseObjects(t, v, ns, release)
			byKind := map[string]corpusObject{}
			for _, o := range objs {
				if _, ok := byKind[o.kind]; !ok {
					byKind[o.kind] = o
				}
			}
			if len(objs) < 30 || len(byKind) < 12 {
				t.Fatalf("the corpus has %d objects of %d kinds; want at least 30 of 12", len(objs), len(byKind))
			}

			// Locking what Helm has just installed writes nothing.
			if wrote := lockerWrote(t, objs); len(wrote) > 0 {
				t.Errorf("the locker wrote to objects Helm had just installed: %v", wrote)
			}
			noDrift(t, cr, "after the first lock")

			// An unrelated label on every object is no drift and
			// makes no write.
			for _, o := range objs {
				o.patch(t, types.MergePatchType, `{"metadata":{"labels":{"touched-by":"another-tool"}}}`)
			}
			time.Sleep(3 * time.Second) // past the 2 s the drift bookkeeping waits
			if wrote := lockerWrote(t, objs); len(wrote) > 0 {
				t.Errorf("unrelated labels made the locker write to %v", wrote)
			}
			noDrift(t, cr, "after labelling every object")
			for _, o := range objs {
				if o.get(t).GetLabels()["touched-by"] != "another-tool" {
					t.Errorf("%s lost the unrelated label", o)
				}
			}

			// An edit of each kind is reverted.
			for _, o := range byKind {
				o.patch(t, types.MergePatchType, `{"metadata":{"labels":{"app.kubernetes.io/part-of":"tampered"}}}`)
			}
			for _, o := range byKind {
				env.Eventually(t, 30*time.Second, func() error {
					if got := o.get(t).GetLabels()["app.kubernetes.io/part-of"]; got != "webstack" {
						return fmt.Errorf("%s: label part-of = %q, want webstack back", o, got)
					}
					return nil
				})
			}

			// Helm's ownership metadata, which Helm adds as it
			// applies and the stored manifest lacks, is held too.
			owned := byKind["ConfigMap"]
			owned.patch(t, types.MergePatchType, `{"metadata":{"labels":{"app.kubernetes.io/managed-by":null},"annotations":{"meta.helm.sh/release-name":null}}}`)
			env.Eventually(t, 30*time.Second, func() error {
				live := owned.get(t)
				if live.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" || live.GetAnnotations()["meta.helm.sh/release-name"] != release {
					return fmt.Errorf("%s: Helm's ownership metadata not restored: labels %v, annotations %v", owned, live.GetLabels(), live.GetAnnotations())
				}
				return nil
			})

			// Kubernetes' own rules. The TCP entry of a port 53
			// served on UDP and TCP, keyed by port and protocol.
			dns := corpusObject{kind: "Service", gvr: schema.GroupVersionResource{Version: "v1", Resource: "services"}, namespace: ns, name: release + "-webstack-dns"}
			dns.patch(t, types.JSONPatchType, `[{"op":"test","path":"/spec/ports/1/protocol","value":"TCP"},{"op":"replace","path":"/spec/ports/1/targetPort","value":5353}]`)
			env.Eventually(t, 30*time.Second, func() error {
				ports, _, _ := unstructured.NestedSlice(dns.get(t).Object, "spec", "ports")
				for _, p := range ports {
					p := p.(map[string]any)
					if fmt.Sprint(p["targetPort"]) != "53" {
						return fmt.Errorf("%s: port %v/%v targets %v, want 53", dns, p["port"], p["protocol"], p["targetPort"])
					}
				}
				return nil
			})
			// An empty namespaceSelector added to an atomic list of
			// NetworkPolicy peers opens the pods to every namespace.
			np := byKind["NetworkPolicy"]
			np.patch(t, types.JSONPatchType, `[{"op":"add","path":"/spec/ingress/0/from/0/namespaceSelector","value":{}}]`)
			env.Eventually(t, 30*time.Second, func() error {
				ingress, _, _ := unstructured.NestedSlice(np.get(t).Object, "spec", "ingress")
				from, _, _ := unstructured.NestedSlice(ingress[0].(map[string]any), "from")
				if _, ok := from[0].(map[string]any)["namespaceSelector"]; ok {
					return fmt.Errorf("%s: the peer still has the namespaceSelector", np)
				}
				return nil
			})
			// A union: the declared Recreate strategy alone.
			deploy := byKind["Deployment"]
			deploy.patch(t, types.MergePatchType, `{"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":1}}}}`)
			env.Eventually(t, 30*time.Second, func() error {
				strategy, _, _ := unstructured.NestedMap(deploy.get(t).Object, "spec", "strategy")
				if strategy["type"] != "Recreate" || strategy["rollingUpdate"] != nil {
					return fmt.Errorf("%s: strategy %v, want Recreate alone", deploy, strategy)
				}
				return nil
			})

			// A custom resource by its CRD's rules, as the API server
			// publishes them: a label added to an atomic map is
			// removed, and a map list's entries are matched by port
			// and protocol.
			gizmo := byKind["Gizmo"]
			gizmo.patch(t, types.MergePatchType, `{"spec":{"selector":{"tier":"any"}}}`)
			gizmo.patch(t, types.JSONPatchType, `[{"op":"test","path":"/spec/ports/1/protocol","value":"TCP"},{"op":"add","path":"/spec/ports/1/name","value":"dns-tcp"},{"op":"add","path":"/spec/ports/-","value":{"port":54,"protocol":"UDP"}}]`)
			env.Eventually(t, 30*time.Second, func() error {
				spec, _, _ := unstructured.NestedMap(gizmo.get(t).Object, "spec")
				if selector, _ := spec["selector"].(map[string]any); len(selector) != 2 || selector["tier"] != nil {
					return fmt.Errorf("%s: selector %v, want the two declared labels alone", gizmo, selector)
				}
				want := []any{
					map[string]any{"port": int64(53), "protocol": "UDP"},
					map[string]any{"port": int64(53), "protocol": "TCP", "name": "dns-tcp"},
				}
				if diff := cmp.Diff(want, spec["ports"]); diff != "" {
					return fmt.Errorf("%s: ports (-want +got):\n%s", gizmo, diff)
				}
				return nil
			})

			// A deletion of each kind is recreated.
			for _, o := range byKind {
				o.delete(t)
			}
			for _, o := range byKind {
				env.Eventually(t, 30*time.Second, func() error {
					if o.get(t) == nil {
						return fmt.Errorf("%s was not recreated", o)
					}
					return nil
				})
			}

			// The next revision is locked.
			env.Helm(t, v, "upgrade", release, chart, "-n", ns, "--set", "replicaCount=3,config.logLevel=debug")
			hr = env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			if c := findCondition(hr, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("Locked after the upgrade = %+v, want True", c)
			}
			cm := corpusObject{kind: "ConfigMap", gvr: configMaps, namespace: ns, name: release + "-webstack"}
			cm.patch(t, types.MergePatchType, `{"data":{"LOG_LEVEL":"trace"}}`)
			env.Eventually(t, 30*time.Second, func() error {
				if got, _, _ := unstructured.NestedString(cm.get(t).Object, "data", "LOG_LEVEL"); got != "debug" {
					return fmt.Errorf("%s: LOG_LEVEL = %q, want debug", cm, got)
				}
				return nil
			})
		})
	}
}

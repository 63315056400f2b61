package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

// The tests here use the ManifestLock and the library as a first user
// would (issue 19): a manifest that lists its objects before their
// Namespace and CRD, a rest.Config straight from clientcmd, OnDrift through
// the set's own Update, and a ManifestLock of an object a HelmRelease holds.

// permanentReasons are the reasons that say an object cannot be held until
// the declaration or the cluster changes.
var permanentReasons = []string{
	engine.ReasonNamespaceNotFound, engine.ReasonInvalid, engine.ReasonForbidden, engine.ReasonBadRequest,
	engine.ReasonTooLarge, engine.ReasonImmutable, engine.ReasonMethodNotAllowed,
}

// randomHex returns six random hex digits, the suffix env.Namespace uses.
func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freshName returns a unique name for something the test must not create
// itself, such as a namespace its lock is to create: the test's name, then
// part, then a random suffix, as env.Namespace names them.
func freshName(t *testing.T, part string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 30 {
		name = name[:30]
	}
	return strings.Trim(name, "-") + "-" + part + "-" + randomHex(t)
}

// outOfOrderManifest lists a Deployment, a Service and a custom resource
// in namespace ns before the Namespace itself and the CRD of the custom
// resource, as a hand-written manifest often does.
func outOfOrderManifest(ns, group string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: registry.invalid/web:1
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: %[1]s
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: %[2]s/v1
kind: Widget
metadata:
  name: one
  namespace: %[1]s
spec:
  size: 3
---
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[2]s
spec:
  group: %[2]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`, ns, group)
}

// permanentProblems lists what the lock's status reports as a permanent
// failure: notLocked entries and the Locked condition's reason.
func permanentProblems(ml *mlv1.ManifestLock) []string {
	var out []string
	for _, p := range ml.Status.NotLocked {
		if slices.Contains(permanentReasons, p.Reason) {
			out = append(out, fmt.Sprintf("notLocked %s: %s: %s", p.Object, p.Reason, p.Message))
		}
	}
	if c := apimeta.FindStatusCondition(ml.Status.Conditions, v1alpha1.ConditionLocked); c != nil && slices.Contains(permanentReasons, c.Reason) {
		out = append(out, fmt.Sprintf("condition Locked=%s %s: %s", c.Status, c.Reason, c.Message))
	}
	return out
}

// TestCreationOrder: a manifest that lists its objects before their
// Namespace and CRD is created in the order kubectl and Helm use, by a
// ManifestLock and by the library alike: locked within 10 s every time,
// with no permanent failure reported on the way. Ten rounds, since a random
// order fails only some of the time.
func TestCreationOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const rounds, within = 10, 10 * time.Second
	l := startLibraryLocker(t, "creation-order-e2e")
	for round := range rounds {
		mlNS, libNS := freshName(t, fmt.Sprintf("r%d-ml", round)), freshName(t, fmt.Sprintf("r%d-lib", round))
		mlGroup := fmt.Sprintf("o%d%s.example.com", round, randomHex(t))
		libGroup := fmt.Sprintf("o%d%s.example.com", round, randomHex(t))

		// The library: Lock, then WaitLocked while the ManifestLock
		// below is polled.
		objs, err := manifest.Parse(strings.NewReader(outOfOrderManifest(libNS, libGroup)))
		if err != nil {
			t.Fatal(err)
		}
		libStart := time.Now()
		set, err := l.Lock(ctx, "order-"+libNS, objs)
		if err != nil {
			t.Fatalf("round %d: Lock of a manifest that lists its Namespace and CRD last: %v", round, err)
		}
		t.Cleanup(set.Unlock)
		type waited struct {
			took time.Duration
			err  error
		}
		libDone := make(chan waited, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, within)
			defer cancel()
			err := set.WaitLocked(wctx)
			libDone <- waited{time.Since(libStart), err}
		}()

		// The ManifestLock: its status is read every 50 ms until it is
		// Locked, and must never report a permanent failure.
		mlName := "order-" + mlNS
		mlStart := time.Now()
		createManifestLock(t, framework.RegistrationNamespace, mlName, map[string]any{"manifest": outOfOrderManifest(mlNS, mlGroup)})
		t.Cleanup(func() {
			_ = env.Dynamic.Resource(mlv1.Resource).Namespace(framework.RegistrationNamespace).Delete(context.Background(), mlName, metav1.DeleteOptions{})
		})
		var ml *mlv1.ManifestLock
		var mlTook time.Duration
		for {
			ml = getManifestLock(t, framework.RegistrationNamespace, mlName)
			if problems := permanentProblems(ml); len(problems) > 0 {
				t.Errorf("round %d: ManifestLock %s reported a permanent failure %s after creation, while its Namespace and CRD were on their way:\n%s",
					round, mlName, time.Since(mlStart).Round(time.Millisecond), strings.Join(problems, "\n"))
				break
			}
			if ml.Status.State == mlv1.StateLocked && ml.Status.ObservedGeneration == ml.Generation {
				mlTook = time.Since(mlStart)
				break
			}
			if time.Since(mlStart) > within {
				t.Errorf("round %d: ManifestLock %s not Locked within %s: state %q at generation %d of %d, notLocked %+v, conditions %+v",
					round, mlName, within, ml.Status.State, ml.Status.ObservedGeneration, ml.Generation, ml.Status.NotLocked, ml.Status.Conditions)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if mlTook > 0 {
			if ml.Status.LockedObjects != 5 || len(ml.Status.NotLocked) != 0 {
				t.Errorf("round %d: ManifestLock %s is Locked with %d objects locked and notLocked %+v; want all 5 locked",
					round, mlName, ml.Status.LockedObjects, ml.Status.NotLocked)
			}
		}

		w := <-libDone
		var notLocked *engine.NotLockedError
		switch {
		case errors.As(w.err, &notLocked):
			t.Errorf("round %d: WaitLocked reported a permanent failure %s after Lock, while the Namespace and CRD were on their way: %v",
				round, w.took.Round(time.Millisecond), w.err)
		case w.err != nil:
			res, _ := set.Result()
			t.Errorf("round %d: library set not locked within %s: %v\nresult: %+v", round, within, w.err, res)
		default:
			if res, _ := set.Result(); res.Objects != 5 || res.Locked != 5 {
				t.Errorf("round %d: library set locked with result %+v; want 5 objects, all locked", round, res)
			}
		}
		mlLog, libLog := "not locked", "not locked"
		if mlTook > 0 {
			mlLog = mlTook.Round(time.Millisecond).String()
		}
		if w.err == nil {
			libLog = w.took.Round(time.Millisecond).String()
		}
		t.Logf("round %d: time to Locked: ManifestLock %s, library %s", round, mlLog, libLog)
	}
}

// TestLibraryLockRateDefaultConfig: a rest.Config as clientcmd builds it,
// which leaves client-go to its default of 5 requests a second, does not
// make Lock slow: 50 ConfigMaps are locked in under a second, where that
// limit took 8, in the best of three rounds. The test is not parallel, so
// that the e2e tests of its package do not make its time.
func TestLibraryLockRateDefaultConfig(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.CP.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rest.Config from clientcmd: QPS %v, Burst %d", cfg.QPS, cfg.Burst)
	l := startLibraryLockerWith(t, cfg, "rate-e2e")
	const count, rounds = 50, 3
	// The best of three sets of 50: client-go's limit would hold each to
	// seconds, while a moment of load beside the test (e2e/outage runs at
	// the same time) slows one round, not all.
	best := time.Duration(0)
	for round := range rounds {
		var objs []*unstructured.Unstructured
		for i := range count {
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": fmt.Sprintf("cm-%d-%02d", round, i)},
				"data":     map[string]any{"key": "declared"},
			}})
		}
		start := time.Now()
		set, err := l.Lock(ctx, fmt.Sprintf("rate-%d", round), objs, engine.DefaultNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		returned := time.Since(start)
		t.Cleanup(set.Unlock)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = set.WaitLocked(wctx)
		cancel()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: WaitLocked after %s: %v", round, took.Round(time.Millisecond), err)
		}
		t.Logf("round %d: Lock of %d ConfigMaps returned after %s, WaitLocked after %s, default rest.Config", round, count, returned.Round(time.Millisecond), took.Round(time.Millisecond))
		if res, _ := set.Result(); res.Objects != count || res.Locked != count {
			t.Errorf("round %d: result %+v; want %d objects, all locked", round, res, count)
		}
		if best == 0 || took < best {
			best = took
		}
	}
	if best >= time.Second {
		t.Errorf("Lock of %d ConfigMaps with a default rest.Config took at best %s of %d rounds to WaitLocked; want under 1s", count, best.Round(time.Millisecond), rounds)
	}
}

// driftSummary is what a test compares of a Drift.
type driftSummary struct {
	Ref                                string
	Paths                              []string
	Deleted, Corrected, Held, Applying bool
}

func summarize(d engine.Drift) driftSummary {
	return driftSummary{Ref: d.Ref.String(), Paths: d.Paths, Deleted: d.Deleted, Corrected: d.Corrected, Held: d.Held, Applying: d.Applying}
}

// TestOnDriftOnlyOthers: OnDrift is silent through the set's own Lock and
// Update, and called once for one change another manager made.
func TestOnDriftOnlyOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	l := startLibraryLocker(t, "ondrift-e2e")
	declare := func(a, b string) []*unstructured.Unstructured {
		cm := func(name, value string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": name},
				"data":     map[string]any{"key": value},
			}}
		}
		return []*unstructured.Unstructured{cm("a", a), cm("b", b)}
	}
	var mu sync.Mutex
	var drifts []engine.Drift
	recorded := func() []engine.Drift {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(drifts)
	}
	set, err := l.Lock(ctx, "only-others", declare("declared", "declared"), engine.DefaultNamespace(ns), engine.OnDrift(func(d engine.Drift) {
		mu.Lock()
		defer mu.Unlock()
		drifts = append(drifts, d)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Unlock)
	wait := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := set.WaitLocked(wctx); err != nil {
			t.Fatalf("WaitLocked after %s: %v", what, err)
		}
	}
	wait("Lock")

	// The set's own new declaration is applied, and is no drift.
	if err := set.Update(ctx, declare("updated", "declared")); err != nil {
		t.Fatal(err)
	}
	wait("Update")
	waitData(t, ns, "a", "updated")
	env.Consistently(t, 2*time.Second, func() error {
		if got := recorded(); len(got) != 0 {
			return fmt.Errorf("OnDrift was called %d times through the set's own Lock and Update; want none: %+v", len(got), got)
		}
		return nil
	})

	// Another manager's change is drift: reverted and reported, once.
	edit(t, configMaps, ns, "a", `{"data":{"key":"edited"}}`, "someone-else")
	waitData(t, ns, "a", "updated")
	env.Consistently(t, 2*time.Second, func() error {
		if got := recorded(); len(got) > 1 {
			return fmt.Errorf("OnDrift was called %d times for one edit by someone-else; want once: %+v", len(got), got)
		}
		return nil
	})
	got := recorded()
	if len(got) != 1 {
		t.Fatalf("OnDrift was called %d times for one edit by someone-else; want once: %+v", len(got), got)
	}
	want := driftSummary{Ref: "configmaps/" + ns + "/a", Paths: []string{"/data/key"}, Corrected: true}
	if diff := cmp.Diff(want, summarize(got[0])); diff != "" {
		t.Errorf("the drift reported for the edit by someone-else (-want +got):\n%s", diff)
	}
	if !slices.ContainsFunc(got[0].Managers, func(m engine.Manager) bool { return m.Name == "someone-else" }) {
		t.Errorf("the drift's managers are %+v; want someone-else among them", got[0].Managers)
	}
}

// TestHelmReleaseAndManifestLockConflict: a ManifestLock that declares a
// ConfigMap a HelmRelease already holds, with another value, does not
// fight it: it reports Conflict naming the HelmRelease and writes nothing,
// until the HelmRelease is deleted and it takes the ConfigMap over with one
// write.
func TestHelmReleaseAndManifestLockConflict(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	const release = "rel"
	cmName := release + "-0"
	env.Helm(t, framework.Helm3, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", "value=from-helm")
	cr := env.Register(t, ns, release)
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
	waitKey(t, ns, cmName, "from-helm")

	// Every write to the ConfigMap from here on is a MODIFIED event.
	live, err := env.Dynamic.Resource(configMaps).Namespace(ns).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.Dynamic.Resource(configMaps).Namespace(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", cmName).String(),
		ResourceVersion: live.GetResourceVersion(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var modified []string // data.key of each MODIFIED event
	var other []string    // any other event, which there should be none of
	var stopping atomic.Bool
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if stopping.Load() {
				// Stopping the watch may end it with an error.
				continue
			}
			mu.Lock()
			if obj, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified {
				v, _, _ := unstructured.NestedString(obj.Object, "data", "key")
				modified = append(modified, v)
			} else {
				other = append(other, fmt.Sprintf("%s %v", ev.Type, ev.Object))
			}
			mu.Unlock()
		}
	}()
	writes := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(modified)
	}

	mlName := "conflict-" + ns
	createManifestLock(t, framework.RegistrationNamespace, mlName, map[string]any{
		"manifest": configMapYAML(cmName, "from-manifestlock"), "namespace": ns,
	})
	conflictOf := func(ml *mlv1.ManifestLock) *v1alpha1.ObjectProblem {
		for i, p := range ml.Status.NotLocked {
			if p.Reason == "Conflict" {
				return &ml.Status.NotLocked[i]
			}
		}
		return nil
	}
	wantObject := "ConfigMap " + ns + "/" + cmName
	env.Eventually(t, 30*time.Second, func() error {
		ml := getManifestLock(t, framework.RegistrationNamespace, mlName)
		c := conflictOf(ml)
		if c == nil || c.Object != wantObject || !strings.Contains(c.Message, "HelmRelease") || !strings.Contains(c.Message, cr) {
			return fmt.Errorf("ManifestLock %s: notLocked %+v, state %q, conditions %+v; want %s with reason Conflict, its message naming HelmRelease %s",
				mlName, ml.Status.NotLocked, ml.Status.State, ml.Status.Conditions, wantObject, cr)
		}
		return nil
	})
	env.Consistently(t, 3*time.Second, func() error {
		if v, _ := keyOf(t, ns, cmName); v != "from-helm" {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q while the HelmRelease holds it; want from-helm", ns, cmName, v)
		}
		if got := writes(); len(got) != 0 {
			return fmt.Errorf("ConfigMap %s/%s was written %d times while the HelmRelease holds it (data.key of each: %q); want none", ns, cmName, len(got), got)
		}
		return nil
	})
	if hr := env.HelmRelease(t, cr); hr.Status.State != v1alpha1.StateDeployed {
		t.Errorf("HelmRelease %s: state %q, conditions %+v; want it still Deployed beside the conflicting ManifestLock", cr, hr.Status.State, hr.Status.Conditions)
	}

	// The holder goes; the ManifestLock takes the ConfigMap over.
	if err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Delete(ctx, cr, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForKey(t, ns, cmName, "from-manifestlock")
	env.Eventually(t, 30*time.Second, func() error {
		ml := getManifestLock(t, framework.RegistrationNamespace, mlName)
		if ml.Status.State != mlv1.StateLocked || ml.Status.ObservedGeneration != ml.Generation || conflictOf(ml) != nil {
			return fmt.Errorf("ManifestLock %s after the HelmRelease was deleted: state %q at generation %d of %d, notLocked %+v; want Locked with no Conflict",
				mlName, ml.Status.State, ml.Status.ObservedGeneration, ml.Generation, ml.Status.NotLocked)
		}
		return nil
	})
	env.Consistently(t, time.Second, func() error {
		if v, _ := keyOf(t, ns, cmName); v != "from-manifestlock" {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q after the takeover; want from-manifestlock", ns, cmName, v)
		}
		return nil
	})

	select {
	case <-watchDone:
		t.Errorf("the watch of ConfigMap %s/%s ended before the test did: writes after that were not counted", ns, cmName)
	default:
	}
	stopping.Store(true)
	w.Stop()
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	if len(modified) > 1 {
		t.Errorf("ConfigMap %s/%s was written %d times from the ManifestLock's creation on; want at most once, the takeover. data.key of each write: %q",
			ns, cmName, len(modified), modified)
	}
	if len(other) != 0 {
		t.Errorf("the watch of ConfigMap %s/%s saw events other than MODIFIED (it may have missed writes): %q", ns, cmName, other)
	}
}

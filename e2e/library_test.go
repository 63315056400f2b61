package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

var services = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// rawManifest is a plain YAML file as an operator would ship it: no Helm
// anywhere. Its Deployment writes quantities in a form the API server
// stores otherwise, and its Service has two ports on one number.
func rawManifest(ns string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  key: declared
  app.conf: |
    listen 8080
---
apiVersion: v1
kind: Service
metadata:
  name: dns
spec:
  selector: {app: dns}
  ports:
  - {name: dns-udp, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      nodeSelector: {}
      containers:
      - name: app
        image: registry.invalid/app:1
        resources:
          requests: {cpu: "0.5", memory: 1024Mi}
          limits: {cpu: 1000m}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %s-reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, ns)
}

// startLibraryLocker runs an engine.Locker in the test process against the
// control plane, until the test ends.
func startLibraryLocker(t *testing.T, manager string) *engine.Locker {
	t.Helper()
	return startLibraryLockerWith(t, env.CP.Config, manager)
}

// startLibraryLockerWith is startLibraryLocker with a rest.Config of the
// test's own.
func startLibraryLockerWith(t *testing.T, cfg *rest.Config, manager string) *engine.Locker {
	t.Helper()
	l, err := engine.NewLocker(cfg, engine.Options{FieldManager: manager})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return l
}

// TestLibraryLocksARawManifest uses the engine as an operator would: parse
// a YAML file, lock it, wait, and watch it be held.
func TestLibraryLocksARawManifest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	objs, err := manifest.Parse(strings.NewReader(rawManifest(ns)))
	if err != nil {
		t.Fatal(err)
	}
	l := startLibraryLocker(t, "library-e2e")

	// Bad input fails Lock at once, names every bad object, and
	// creates nothing.
	bad, err := manifest.Parse(strings.NewReader(`apiVersion: v1
kind: ConfigMap
metadata: {name: fine}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: Not_A_Name}
---
apiVersion: v1
kind: Service
metadata: {name: typo}
spec: {ports: [{port: 80}], selectr: {app: x}}
---
apiVersion: example.invalid/v1
kind: Nothing
metadata: {name: nothing}
`))
	if err != nil {
		t.Fatal(err)
	}
	// manifest.Parse refuses an object with no name; a caller that
	// builds its own may still pass one.
	bad = append(bad, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{}}})
	_, err = l.Lock(ctx, "bad", bad, engine.DefaultNamespace(ns))
	var typeErr *engine.TypeError
	if err == nil || !strings.Contains(err.Error(), "configmaps/"+ns+"/Not_A_Name") || !strings.Contains(err.Error(), "services/"+ns+"/typo") ||
		!strings.Contains(err.Error(), "selectr") || !errors.As(err, &typeErr) || typeErr.Name != "nothing" ||
		!strings.Contains(err.Error(), "a Secret has no metadata.name") {
		t.Fatalf("Lock of bad objects = %v; want one error naming Not_A_Name, the typo, the unknown kind and the Secret with no name", err)
	}
	if env.Get(t, "v1", "configmaps", ns, "fine") != nil {
		t.Fatal("a Lock that failed created an object")
	}
	if _, err := l.Lock(ctx, "no-namespace", objs[:1]); err == nil || !strings.Contains(err.Error(), "no DefaultNamespace") {
		t.Fatalf("Lock of a namespaced object with no namespace = %v", err)
	}

	drifts := make(chan engine.Drift, 16)
	set, err := l.Lock(ctx, "app", objs, engine.DefaultNamespace(ns), engine.OnDrift(func(d engine.Drift) { drifts <- d }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Unlock)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := set.WaitLocked(wctx); err != nil {
		t.Fatal(err)
	}
	if res, _ := set.Result(); res.Objects != 4 || res.Locked != 4 {
		t.Fatalf("result %+v; want 4 objects locked", res)
	}
	if created := set.Created(); len(created) != 4 {
		t.Errorf("Created() = %v; want the 4 objects the lock applied", created)
	}
	// One object, one set: another set of the Locker may not hold it.
	var conflict *engine.ConflictError
	if _, err := l.Lock(ctx, "second", objs[:1], engine.DefaultNamespace(ns)); !errors.As(err, &conflict) || conflict.Holder != "app" {
		t.Errorf("Lock of an object set app holds = %v; want a ConflictError naming app", err)
	}
	// Created as declared; held as stored, so the normalized quantities
	// and the empty nodeSelector are no difference.
	if diffs, err := set.Diff(ctx); err != nil || len(diffs) != 0 {
		t.Fatalf("Diff of a set just locked = %+v, %v; want none", diffs, err)
	}

	// An edit is reverted, and reported with its path and its author.
	edit(t, configMaps, ns, "app-config", `{"data":{"key":"edited"}}`, "e2e-editor")
	d := nextDrift(t, drifts, "configmaps/"+ns+"/app-config")
	if !d.Corrected || !slices.Equal(d.Paths, []string{"/data/key"}) || !slices.ContainsFunc(d.Managers, func(m engine.Manager) bool { return m.Name == "e2e-editor" }) {
		t.Errorf("drift %+v; want /data/key corrected, blamed on e2e-editor", d)
	}
	waitData(t, ns, "app-config", "declared")

	// A deleted object is recreated.
	if err := env.Dynamic.Resource(services).Namespace(ns).Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := nextDrift(t, drifts, "services/"+ns+"/dns"); !d.Deleted || !d.Corrected {
		t.Errorf("drift %+v; want the deletion corrected", d)
	}
	env.Eventually(t, 10*time.Second, func() error {
		if env.Get(t, "v1", "services", ns, "dns") == nil {
			return errors.New("service dns not recreated")
		}
		return nil
	})

	// A new declaration is applied and held.
	objs[0].Object["data"].(map[string]any)["key"] = "updated"
	if err := set.Update(ctx, objs); err != nil {
		t.Fatal(err)
	}
	if err := set.WaitLocked(wctx); err != nil {
		t.Fatal(err)
	}
	waitData(t, ns, "app-config", "updated")

	// Unlocked, the objects stay and edits stay.
	set.Unlock()
	edit(t, configMaps, ns, "app-config", `{"data":{"key":"free"}}`, "e2e-editor")
	env.Consistently(t, time.Second, func() error {
		if v := data(t, ns, "app-config"); v != "free" {
			return fmt.Errorf("after Unlock, data.key went back to %q", v)
		}
		return nil
	})
}

// TestLibraryDiffAndWarnOnly: a WarnOnly set reports drift and writes
// nothing, and Diff shows it as a unified diff naming its author.
func TestLibraryDiffAndWarnOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	objs, err := manifest.Parse(strings.NewReader(rawManifest(ns)))
	if err != nil {
		t.Fatal(err)
	}
	l := startLibraryLocker(t, "library-e2e")
	drifts := make(chan engine.Drift, 16)
	// The ClusterRole is left to the other test's set.
	set, err := l.Lock(ctx, "warn", objs[:3], engine.DefaultNamespace(ns), engine.WarnOnly(),
		engine.Ignore(engine.IgnoreRule{Kind: "Deployment", Paths: []string{"/spec/replicas"}}),
		engine.OnDrift(func(d engine.Drift) { drifts <- d }))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Unlock()
	// WarnOnly creates nothing either: the set is not locked until the
	// objects exist.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := set.WaitLocked(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitLocked of a WarnOnly set whose objects do not exist = %v", err)
	}
	for _, obj := range objs[:3] {
		obj.SetNamespace(ns)
		if _, err := env.Dynamic.Resource(resourceOf(obj)).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := set.WaitLocked(wctx); err != nil {
		t.Fatal(err)
	}
	if created := set.Created(); len(created) != 0 {
		t.Errorf("Created() = %v; the set adopted every object, it created none", created)
	}

	edit(t, configMaps, ns, "app-config", `{"data":{"key":"edited"}}`, "e2e-editor")
	edit(t, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, ns, "app", `{"spec":{"replicas":3}}`, "e2e-scaler")
	if d := nextDrift(t, drifts, "configmaps/"+ns+"/app-config"); d.Corrected {
		t.Errorf("a WarnOnly set corrected %+v", d)
	}
	diffs, err := set.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 {
		t.Fatalf("Diff = %+v; want the ConfigMap alone (replicas are ignored)", diffs)
	}
	got := diffs[0]
	if got.Ref.Name != "app-config" || !slices.Equal(got.Paths, []string{"/data/key"}) || len(got.Managers) != 1 || got.Managers[0].Name != "e2e-editor" ||
		!strings.Contains(got.Text, "-  key: edited") || !strings.Contains(got.Text, "+  key: declared") || strings.Contains(got.Text, "managedFields") {
		t.Errorf("diff %+v\n%s", got, got.Text)
	}
	if v := data(t, ns, "app-config"); v != "edited" {
		t.Errorf("a WarnOnly set wrote data.key = %q", v)
	}
}

// TestExampleOperator builds the example operator in examples/, its own
// module, and runs it as its users would: it locks a YAML file and prints
// a drift within a second of an edit.
func TestExampleOperator(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "lock-manifest")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "examples", "lock-manifest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(file, []byte(rawManifest(ns)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcess("lock-manifest", bin, []string{"--kubeconfig", env.CP.Kubeconfig, "-f", file, "-n", ns}, filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(10 * time.Second) }()
	waitLine := func(timeout time.Duration, match func(map[string]any) bool) time.Time {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if line := findLine(t, p.Log, match); line {
				return time.Now()
			}
			time.Sleep(5 * time.Millisecond)
		}
		out, _ := os.ReadFile(p.Log)
		t.Fatalf("the example printed no such line within %s:\n%s", timeout, out)
		return time.Time{}
	}
	waitLine(60*time.Second, func(e map[string]any) bool { return e["event"] == "locked" && e["objects"] == 4.0 })

	edited := edit(t, configMaps, ns, "app-config", `{"data":{"key":"edited"}}`, "e2e-editor")
	seen := waitLine(10*time.Second, func(e map[string]any) bool {
		return e["event"] == "drift" && e["object"] == "configmaps/"+ns+"/app-config" && e["corrected"] == true
	})
	if took := seen.Sub(edited); took > time.Second {
		t.Errorf("the drift callback came %s after the edit; want within a second", took)
	}
	waitData(t, ns, "app-config", "declared")
}

// findLine reports whether the JSON-lines log has a line match accepts.
func findLine(t *testing.T, log string, match func(map[string]any) bool) bool {
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && match(e) {
			return true
		}
	}
	return false
}

// edit merge-patches an object as manager and returns when the patch was
// answered.
func edit(t *testing.T, gvr schema.GroupVersionResource, ns, name, patch, manager string) time.Time {
	t.Helper()
	if _, err := env.Dynamic.Resource(gvr).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: manager}); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// nextDrift waits for the next drift of the object ref names.
func nextDrift(t *testing.T, drifts <-chan engine.Drift, ref string) engine.Drift {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case d := <-drifts:
			if d.Ref.String() == ref {
				return d
			}
		case <-timeout:
			t.Fatalf("no drift of %s reported", ref)
		}
	}
}

func data(t *testing.T, ns, name string) string {
	t.Helper()
	obj := env.Get(t, "v1", "configmaps", ns, name)
	if obj == nil {
		return "<missing>"
	}
	v, _, _ := unstructured.NestedString(obj.Object, "data", "key")
	return v
}

func waitData(t *testing.T, ns, name, want string) {
	t.Helper()
	env.Eventually(t, 10*time.Second, func() error {
		if v := data(t, ns, name); v != want {
			return fmt.Errorf("configmap %s/%s has data.key %q, want %q", ns, name, v, want)
		}
		return nil
	})
}

// resourceOf maps the kinds of rawManifest to their resources.
func resourceOf(obj *unstructured.Unstructured) schema.GroupVersionResource {
	gv := obj.GroupVersionKind().GroupVersion()
	return gv.WithResource(strings.ToLower(obj.GetKind()) + "s")
}

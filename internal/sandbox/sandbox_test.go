package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/manifest"
)

// TestMain runs the child when a Renderer starts this test binary, as it
// starts helm-locker: with Subcommand, and nothing else. Under the race
// detector, the tests start testdata/child instead (see childCommand).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == Subcommand {
		if err := RunChild(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "Error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) == 2 && os.Args[1] == loopingParent {
		os.Exit(renderLoop())
	}
	os.Exit(runTests(m))
}

// loopingParent runs this test binary as a process that renders a chart
// that loops, until it is killed (see TestChildDiesWithParent).
const loopingParent = "render-a-loop"

func renderLoop() int {
	c, _ := cluster()
	var command []string
	if bin := os.Getenv("SANDBOX_TEST_CHILD"); bin != "" {
		command = []string{bin, Subcommand}
	}
	rel := releaseOf(&testing.T{}, manifest.Helm3, chartOf(map[string]string{"a.yaml": `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`}), nil)
	_, err := New(Options{Timeout: time.Minute, Command: command}).Render(context.Background(), rel, c)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// childCommand is Options.Command for the tests: this test binary's own,
// or under the race detector, testdata/child built without it.
var childCommand []string

func runTests(m *testing.M) int {
	if raceEnabled {
		dir, err := os.MkdirTemp("", "sandbox-child-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "child")
		if out, err := exec.Command("go", "build", "-o", bin, "./testdata/child").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the child: %v\n%s", err, out)
			return 1
		}
		childCommand = []string{bin, Subcommand}
	}
	return m.Run()
}

// options are opts with the tests' child.
func options(opts Options) Options {
	opts.Command = childCommand
	return opts
}

var helms = []manifest.Helm{manifest.Helm3, manifest.Helm4}

// releaseOf is revision 1 of release apps/web of ch, as Helm h stores it,
// decoded as the sandbox's child decodes it.
func releaseOf(t testing.TB, h manifest.Helm, ch *chart.Chart, config map[string]any) *render.Release {
	t.Helper()
	raw, err := json.Marshal(&release.Release{Name: "web", Namespace: "apps", Version: 1, Chart: ch, Config: config,
		Info: &release.Info{Status: release.StatusDeployed, Description: "Install complete"}})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := render.DecodeUnchecked(h, []byte(`{"release":`+string(raw)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// chartOf is a chart of the given templates, under templates/.
func chartOf(templates map[string]string, deps ...string) *chart.Chart {
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: "web", Version: "1.0.0"}}
	for name, data := range templates {
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/" + name, Data: []byte(data)})
	}
	for _, d := range deps {
		ch.Metadata.Dependencies = append(ch.Metadata.Dependencies, &chart.Dependency{Name: d, Version: "1.0.0"})
	}
	return ch
}

// dashboard is the render package's grafana-shaped fixture: helpers, a
// password kept through a lookup of its own Secret, checksums, a
// Capabilities branch.
func dashboard(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join("..", "render", "testdata", "dashboard"))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// cluster is a v1.36.3 cluster holding objs, serving ConfigMaps, Secrets,
// Namespaces and ClusterRoles.
func cluster(objs ...runtime.Object) (render.Cluster, *dynamicfake.FakeDynamicClient) {
	mapper := meta.NewDefaultRESTMapper(nil)
	listKinds := map[schema.GroupVersionResource]string{}
	for gvk, scope := range map[schema.GroupVersionKind]meta.RESTScope{
		{Version: "v1", Kind: "ConfigMap"}:                                       meta.RESTScopeNamespace,
		{Version: "v1", Kind: "Secret"}:                                          meta.RESTScopeNamespace,
		{Version: "v1", Kind: "Namespace"}:                                       meta.RESTScopeRoot,
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}: meta.RESTScopeRoot,
	} {
		mapper.Add(gvk, scope)
		m, _ := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		listKinds[m.Resource] = gvk.Kind + "List"
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...)
	versions := append(chartutil.DefaultVersionSet[:len(chartutil.DefaultVersionSet):len(chartutil.DefaultVersionSet)], "policy/v1", "policy/v1/PodDisruptionBudget")
	return render.Cluster{KubeVersion: "v1.36.3", APIVersions: versions, Client: client, Mapper: mapper}, client
}

func object(apiVersion, kind, namespace, name string, fields map[string]any) *unstructured.Unstructured {
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
	if namespace != "" {
		obj["metadata"].(map[string]any)["namespace"] = namespace
	}
	for k, v := range fields {
		obj[k] = v
	}
	return &unstructured.Unstructured{Object: obj}
}

// lookups is a template that looks up an object, one that is not there,
// a list, a cluster-scoped kind with and without a namespace, and an
// integer too large for a float to print as one.
const lookups = `
{{- $cm := lookup "v1" "ConfigMap" "apps" "settings" }}
{{- $missing := lookup "v1" "ConfigMap" "apps" "missing" }}
{{- $cms := lookup "v1" "ConfigMap" "apps" "" }}
{{- $ns := lookup "v1" "Namespace" "" "apps" }}
{{- $nss := lookup "v1" "Namespace" "" "" }}
{{- $role := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "apps" "admin" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: found
data:
  setting: {{ $cm.data.key | quote }}
  size: {{ $cm.spec.size | quote }}
  missing: {{ $missing | toJson | quote }}
  configMaps: {{ len $cms.items | quote }}
  listKind: {{ $cms.kind | quote }}
  namespace: {{ $ns.metadata.name | quote }}
  namespaces: {{ len $nss.items | quote }}
  role: {{ $role.metadata.name | quote }}
`

// TestRenderAsInProcess: a render in the sandbox is the render in
// process, output and errors alike, for each Helm: a real chart under the
// default cap, lookups (made by the parent, with its client), and the
// errors the controller sorts.
func TestRenderAsInProcess(t *testing.T) {
	objs := []runtime.Object{
		object("v1", "Namespace", "", "apps", nil),
		object("v1", "Namespace", "", "other", nil),
		object("v1", "ConfigMap", "apps", "settings", map[string]any{"data": map[string]any{"key": "from-the-cluster"}, "spec": map[string]any{"size": int64(12345678901)}}),
		object("v1", "ConfigMap", "apps", "more", nil),
		object("rbac.authorization.k8s.io/v1", "ClusterRole", "", "admin", nil),
	}
	forbidden := func(c *dynamicfake.FakeDynamicClient) {
		c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "web", errors.New(`User "system:serviceaccount:apps:writer" cannot get`))
		})
	}
	tests := []struct {
		name  string
		chart *chart.Chart
		// installed puts the objects the chart renders in the cluster
		// first, as after `helm install`: a chart that generates a
		// password keeps the one it finds.
		installed bool
		react     func(*dynamicfake.FakeDynamicClient)
		// requests are those the parent's client is to see.
		requests int
		is       func(error) bool
	}{
		{name: "a real chart, installed", chart: dashboard(t), installed: true, requests: 2},
		{name: "lookups", chart: chartOf(map[string]string{"found.yaml": lookups}), requests: 6},
		{name: "a forbidden lookup", chart: chartOf(map[string]string{"a.yaml": `{{ lookup "v1" "Secret" "apps" "web" }}{{ lookup "v1" "ConfigMap" "apps" "settings" }}`}), react: forbidden, requests: 1,
			is: func(err error) bool {
				var le *render.LookupError
				return errors.As(err, &le) && apierrors.IsForbidden(le.Err) && le.Lookup.GVR.Resource == "secrets"
			}},
		{name: "a kind not served", chart: chartOf(map[string]string{"a.yaml": `{{ lookup "example.com/v1" "Widget" "apps" "w" }}`}),
			is: func(err error) bool {
				var le *render.LookupError
				return errors.As(err, &le) && meta.IsNoMatchError(err)
			}},
		{name: "a chart that fails", chart: chartOf(map[string]string{"a.yaml": `{{ fail "the chart says no" }}`}),
			is: func(err error) bool { return strings.Contains(err.Error(), "the chart says no") }},
		{name: "a library chart not stored", chart: chartOf(map[string]string{"a.yaml": `{{ include "common.labels" . }}`}, "common"),
			is: func(err error) bool {
				var nr *render.NotRenderableError
				return errors.As(err, &nr) && nr.Chart == "web-1.0.0" && cmp.Equal(nr.Dependencies, []string{"common"})
			}},
	}
	ctx := context.Background()
	for _, h := range helms {
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				rel := releaseOf(t, h, tt.chart, nil)
				c, client := cluster(objs...)
				if tt.installed {
					c, client = cluster(append(objectsIn(t, rel, c), objs...)...)
				}
				if tt.react != nil {
					tt.react(client)
				}
				want, wantErr := render.Render(ctx, rel, c)
				client.ClearActions()
				got, used, err := New(options(DefaultOptions())).run(ctx, rel, c)
				if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
					t.Fatalf("sandboxed render: %v\nin process: %v", err, wantErr)
				}
				if tt.is != nil && !tt.is(err) {
					t.Errorf("error %v (%T) is not the one the controller sorts", err, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("sandboxed render (-in process +sandboxed):\n%s", diff)
				}
				if n := len(client.Actions()); n != tt.requests {
					t.Errorf("the parent's client made %d requests, want %d: %v", n, tt.requests, client.Actions())
				}
				if used.peakRSS <= 0 || used.peakRSS > DefaultMemoryLimit {
					t.Errorf("the child's peak RSS was %d bytes, want some, under the cap", used.peakRSS)
				}
				t.Logf("the child's peak RSS: %d MiB", used.peakRSS>>20)
			})
		}
	}
}

// TestRenderStopped: a render that loops is stopped at its deadline, and
// one that allocates past its cap, or prints more than the parent reads,
// is stopped for its size; a caller's context stops one too. Each is
// over once its process has exited, and none outlives the call.
func TestRenderStopped(t *testing.T) {
	const timeout = 2 * time.Second
	// memoryTimeout is the deadline of the renders stopped for their
	// size: far past what they take, so that on a busy machine too it is
	// the memory cap that stops them.
	const memoryTimeout = time.Minute
	tests := []struct {
		name     string
		template string
		// memory is the cap, if not the default.
		memory int64
		// timeout is the render's deadline, if not timeout.
		timeout time.Duration
		cancel  time.Duration
		is      func(t *testing.T, err error)
	}{
		{
			name:     "nested ranges, after a lookup",
			template: `{{ $n := lookup "v1" "ConfigMap" "apps" "settings" | dig "data" "n" "100000" | int }}{{ range until $n }}{{ range until $n }}{{ end }}{{ end }}`,
			is: func(t *testing.T, err error) {
				var te *TimeoutError
				if !errors.As(err, &te) || te.Timeout != timeout {
					t.Fatalf("error %v, want a *TimeoutError of %s", err, timeout)
				}
				if len(te.Lookups) != 1 || te.Lookups[0].String() != "ConfigMap apps/settings" {
					t.Errorf("the render looked up %v before it was stopped, want ConfigMap apps/settings", te.Lookups)
				}
			},
		},
		{
			name:     "repeat",
			template: `{{ repeat 1000000000 "x" }}`,
			timeout:  memoryTimeout,
			is:       tooLarge(DefaultMemoryLimit, false),
		},
		{
			name:     "string building",
			template: `{{ $s := "0123456789abcdef" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}{{ len $s }}`,
			timeout:  memoryTimeout,
			is:       tooLarge(DefaultMemoryLimit, false),
		},
		{
			// Under the default cap, a render runs out of memory
			// before its output does: a manifest of 12 MiB renders
			// in it, one of 20 MiB does not.
			name:     "an output larger than a manifest",
			template: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: {{ repeat 20000000 \"x\" }}\n",
			memory:   1 << 30,
			timeout:  memoryTimeout,
			is:       tooLarge(maxFromChild, true),
		},
		{
			name:     "the caller's context",
			template: `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`,
			cancel:   500 * time.Millisecond,
			is: func(t *testing.T, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error %v, want the context's", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			c, _ := cluster()
			deadline := timeout
			if tt.timeout > 0 {
				deadline = tt.timeout
			}
			r := New(options(Options{Timeout: deadline, MemoryLimit: tt.memory}))
			start := time.Now()
			_, err := r.Render(ctx, releaseOf(t, manifest.Helm4, chartOf(map[string]string{"a.yaml": tt.template}), nil), c)
			took := time.Since(start)
			tt.is(t, err)
			// Stopped, not fast: a bound on how fast belongs in a
			// benchmark, and a busy machine is slow.
			if limit := deadline + 10*time.Second; took > limit {
				t.Errorf("stopped after %s, want within %s", took, limit)
			}
			if left := children(t); len(left) > 0 {
				t.Errorf("render processes left running: %v", left)
			}
			t.Logf("stopped after %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// objectsIn are the objects rel renders on c, as Helm applied them.
func objectsIn(t testing.TB, rel *render.Release, c render.Cluster) []runtime.Object {
	t.Helper()
	out, err := render.Render(context.Background(), rel, c)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.ParseRelease(out.Manifest, rel.Helm)
	if err != nil {
		t.Fatal(err)
	}
	var list []runtime.Object
	for _, o := range objs {
		if o.GetNamespace() == "" && o.GetKind() != "Namespace" && o.GetKind() != "ClusterRole" {
			o.SetNamespace(rel.Namespace)
		}
		list = append(list, o)
	}
	return list
}

// tooLarge checks for a *TooLargeError at limit.
func tooLarge(limit int64, output bool) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Limit != limit || tl.Output != output {
			t.Errorf("error %v, want a *TooLargeError at %d bytes (output %v)", err, limit, output)
		}
	}
}

// children are the render processes this test binary started that still
// run, or were not reaped.
func children(t *testing.T) []int {
	t.Helper()
	return childrenOf(t, os.Getpid())
}

// childrenOf are the render processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc to read processes from")
	}
	parent := strconv.Itoa(pid)
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == parent {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.Contains(string(cmdline), Subcommand) {
				out = append(out, child)
			}
		}
	}
	return out
}

// TestRenderBadOptions: a Renderer whose options would not let its
// process start says so, and starts nothing.
func TestRenderBadOptions(t *testing.T) {
	c, _ := cluster()
	rel := releaseOf(t, manifest.Helm3, chartOf(map[string]string{"a.yaml": "a: b"}), nil)
	for _, opts := range []Options{{Timeout: -time.Second}, {MemoryLimit: 1 << 20}} {
		if _, err := New(options(opts)).Render(context.Background(), rel, c); err == nil {
			t.Errorf("Render with %+v succeeded", opts)
		}
	}
	if _, err := New(Options{Command: []string{"/nonexistent/helm-locker"}}).Render(context.Background(), rel, c); !errors.As(err, new(*ProcessError)) {
		t.Errorf("Render with no executable: %v, want a *ProcessError", err)
	}
}

// TestChildDiesWithParent: a locker that dies, however it dies, takes its
// render's process with it; the kernel kills it (Pdeathsig).
func TestChildDiesWithParent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(self, loopingParent)
	if len(childCommand) > 0 {
		parent.Env = append(os.Environ(), "SANDBOX_TEST_CHILD="+childCommand[0])
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		if pids := childrenOf(t, parent.Process.Pid); len(pids) > 0 {
			child = pids[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child == 0 {
		_ = parent.Process.Kill()
		_ = parent.Wait()
		t.Fatal("the parent started no render process within 10 s")
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for {
		// Orphaned, the child is reaped by init once it dies.
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(child))); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the render process %d outlived its parent by 5 s", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

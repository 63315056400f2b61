package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	actionv3 "helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	kubev3 "helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	storagev3 "helm.sh/helm/v3/pkg/storage"
	driverv3 "helm.sh/helm/v3/pkg/storage/driver"
	actionv4 "helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	storagev4 "helm.sh/helm/v4/pkg/storage"
	driverv4 "helm.sh/helm/v4/pkg/storage/driver"

	"github.com/helm-locker/helm-locker/manifest"
)

func TestOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name           string
		opts           Options
		wantHistoryMax int // as Helm's actions take it: 0 is no limit
		wantTimeout    time.Duration
	}{
		{"zero value is helm upgrade's defaults", Options{}, 10, 5 * time.Minute},
		{"DefaultOptions", DefaultOptions(), 10, 5 * time.Minute},
		{"history kept as given", Options{MaxHistory: 3}, 3, 5 * time.Minute},
		{"negative history is no limit", Options{MaxHistory: -1}, 0, 5 * time.Minute},
		{"timeout kept as given", Options{Timeout: 30 * time.Second}, 10, 30 * time.Second},
		{"negative timeout is the default", Options{Timeout: -time.Second}, 10, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.opts.historyMax(); got != tc.wantHistoryMax {
				t.Errorf("historyMax() = %d, want %d", got, tc.wantHistoryMax)
			}
			if got := tc.opts.timeout(); got != tc.wantTimeout {
				t.Errorf("timeout() = %s, want %s", got, tc.wantTimeout)
			}
		})
	}
}

// web is a release of chart "web", rendered from templates/cm.yaml.
func web() *release.Release {
	return &release.Release{
		Name:      "demo",
		Namespace: "apps",
		Version:   1,
		Config:    map[string]any{"greeting": "hi"},
		Manifest:  "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n",
		Chart: &chart.Chart{
			Metadata:  &chart.Metadata{APIVersion: "v2", Name: "web", Version: "0.1.0"},
			Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("kind: ConfigMap")}, {Name: "templates/_helpers.tpl"}},
			Values:    map[string]any{"greeting": "hello"},
		},
	}
}

func TestCheckRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*release.Release) *release.Release
		wantErr error
	}{
		{"whole release", func(r *release.Release) *release.Release { return r }, nil},
		{"nil", func(*release.Release) *release.Release { return nil }, ErrInvalidRelease},
		{"no name", func(r *release.Release) *release.Release { r.Name = ""; return r }, ErrInvalidRelease},
		{"no namespace", func(r *release.Release) *release.Release { r.Namespace = ""; return r }, ErrInvalidRelease},
		{"decoded without its chart", func(r *release.Release) *release.Release { r.Chart = nil; return r }, ErrInvalidRelease},
		{"chart without metadata", func(r *release.Release) *release.Release { r.Chart.Metadata = nil; return r }, ErrInvalidRelease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkRelease(tc.edit(web())); !errors.Is(err, tc.wantErr) {
				t.Errorf("checkRelease() = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestCheckChartComplete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*release.Release)
		wantErr error
	}{
		{"every source stored", func(*release.Release) {}, nil},
		{"post-rendered manifest without sources", func(r *release.Release) { r.Manifest = "apiVersion: v1\nkind: ConfigMap\n" }, nil},
		{"hook from a stored template", func(r *release.Release) {
			r.Chart.Templates = append(r.Chart.Templates, &chart.File{Name: "templates/job.yaml"})
			r.Hooks = []*release.Hook{{Name: "migrate", Path: "web/templates/job.yaml"}}
		}, nil},
		{"dependency declared", func(r *release.Release) {
			r.Chart.Metadata.Dependencies = []*chart.Dependency{{Name: "common", Repository: "oci://registry-1.docker.io/bitnamicharts"}}
		}, ErrIncompleteChart},
		{"subchart output in the manifest", func(r *release.Release) {
			r.Manifest += "---\n# Source: web/charts/redis/templates/svc.yaml\napiVersion: v1\nkind: Service\n"
		}, ErrIncompleteChart},
		{"hook from a template not stored", func(r *release.Release) {
			r.Hooks = []*release.Hook{{Name: "migrate", Path: "web/charts/db/templates/job.yaml"}}
		}, ErrIncompleteChart},
		{"source of another chart's name", func(r *release.Release) {
			r.Manifest = "---\n# Source: other/templates/cm.yaml\nkind: ConfigMap\n"
		}, ErrIncompleteChart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := web()
			tc.edit(r)
			if err := checkChartComplete(r, nil); !errors.Is(err, tc.wantErr) {
				t.Errorf("checkChartComplete() = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestStoredApplyMethod reads the latest revision from Helm 4's storage,
// here its memory driver, and holds it to the release given.
func TestStoredApplyMethod(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func(*releasev4.Release)
		wantMethod string
		wantErr    error
	}{
		{"installed by helm 3", func(*releasev4.Release) {}, "", nil},
		{"helm 4, client-side", func(r *releasev4.Release) { r.ApplyMethod = "csa" }, "csa", nil},
		{"helm 4, server-side", func(r *releasev4.Release) { r.ApplyMethod = "ssa" }, "ssa", nil},
		{"newer revision stored", func(r *releasev4.Release) { r.Version = 2 }, "", ErrReleaseChanged},
		{"manifest rewritten", func(r *releasev4.Release) { r.Manifest += "---\nkind: Secret\n" }, "", ErrReleaseChanged},
		{"values rewritten", func(r *releasev4.Release) { r.Config = map[string]any{"greeting": "pwned"} }, "", ErrReleaseChanged},
		{"values emptied", func(r *releasev4.Release) { r.Config = nil }, "", ErrReleaseChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := web()
			stored := &releasev4.Release{
				Name: given.Name, Namespace: given.Namespace, Version: given.Version, Manifest: given.Manifest,
				Config: map[string]any{"greeting": "hi"},
				Info:   &releasev4.Info{Status: rcommon.StatusDeployed},
			}
			tc.edit(stored)
			mem := driverv4.NewMemory()
			mem.SetNamespace(given.Namespace)
			cfg := &actionv4.Configuration{Releases: storagev4.Init(mem)}
			if err := cfg.Releases.Create(stored); err != nil {
				t.Fatal(err)
			}
			got, err := storedApplyMethod(cfg, given)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("storedApplyMethod() error = %v, want %v", err, tc.wantErr)
			}
			if got != tc.wantMethod {
				t.Errorf("storedApplyMethod() = %q, want %q", got, tc.wantMethod)
			}
		})
	}
}

func TestSameValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b map[string]any
		want bool
	}{
		{"none stored as null or {}", nil, map[string]any{}, true},
		{"equal, nested", map[string]any{"a": map[string]any{"b": 1.0, "c": []any{"x"}}}, map[string]any{"a": map[string]any{"c": []any{"x"}, "b": 1.0}}, true},
		{"a value differs", map[string]any{"a": 1.0}, map[string]any{"a": 2.0}, false},
		{"one side empty", map[string]any{"a": 1.0}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sameValues(tc.a, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("sameValues() = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestCopyChart holds the copy Helm's upgrade gets to be the stored chart,
// for either SDK, and the caller's to stay as it was: Helm's reuseValues
// replaces the chart's values.
func TestCopyChart(t *testing.T) {
	rel := web()
	v3, err := copyChart[chart.Chart](rel.Chart)
	if err != nil {
		t.Fatal(err)
	}
	v3.Values["greeting"] = "changed"
	v3.Templates[0].Data[0] = 'X'
	if rel.Chart.Values["greeting"] != "hello" || string(rel.Chart.Templates[0].Data) != "kind: ConfigMap" {
		t.Errorf("changing the copy changed the caller's chart: values %v, template %q", rel.Chart.Values, rel.Chart.Templates[0].Data)
	}
	v4, err := copyChart[chartv2.Chart](rel.Chart)
	if err != nil {
		t.Fatal(err)
	}
	if v4.Metadata.Name != "web" || len(v4.Templates) != 2 || string(v4.Templates[0].Data) != "kind: ConfigMap" || v4.Values["greeting"] != "hello" {
		t.Errorf("Helm 4's copy = metadata %+v, %d templates, values %v; want the stored chart", v4.Metadata, len(v4.Templates), v4.Values)
	}
}

func TestUseHelmFieldManager(t *testing.T) {
	if err := useHelmFieldManager(); err != nil {
		t.Fatal(err)
	}
	if kubev3.ManagedFieldsManager != "helm" || kubev4.ManagedFieldsManager != "helm" {
		t.Fatalf("field managers %q (v3) and %q (v4), want \"helm\"", kubev3.ManagedFieldsManager, kubev4.ManagedFieldsManager)
	}
	for _, v := range []*string{&kubev3.ManagedFieldsManager, &kubev4.ManagedFieldsManager} {
		*v = "my-operator"
		err := useHelmFieldManager()
		*v = "helm"
		if !errors.Is(err, ErrFieldManager) {
			t.Errorf("useHelmFieldManager() with a manager set elsewhere = %v, want %v", err, ErrFieldManager)
		}
	}
}

// TestUpgradeAsWritten holds the choice of SDK to the Helm that wrote the
// revision, as its stored apply method says: each SDK's configuration
// stores revision 1 in its own memory driver, and revision 2 shows which
// SDK upgraded, and how it applied. A caller that read the revision as
// another Helm's is refused before either upgrades.
func TestUpgradeAsWritten(t *testing.T) {
	for _, tc := range []struct {
		name    string
		method  string        // the stored revision's apply method
		caller  manifest.Helm // opts.Helm
		wantSDK string        // the SDK that stored revision 2, "" for none
		wantErr error
	}{
		{"helm 3 wrote it", "", 0, "helm3", nil},
		{"helm 4 wrote it, client-side", "csa", 0, "csa", nil},
		{"helm 4 wrote it, server-side", "ssa", 0, "ssa", nil},
		{"helm 3 wrote it, as the caller read it", "", manifest.Helm3, "helm3", nil},
		{"helm 4 wrote it, as the caller read it", "csa", manifest.Helm4, "csa", nil},
		{"the caller read helm 4's, helm 3's is stored", "", manifest.Helm4, "", ErrReleaseChanged},
		{"the caller read helm 3's, helm 4's is stored", "ssa", manifest.Helm3, "", ErrReleaseChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			helm3, helm4 := fakeConfigs(t, tc.method)
			_, err := upgradeAsWritten(context.Background(), helm3, helm4, installedWeb(), tc.caller, nil, Options{})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("upgradeAsWritten() = %v, want %v", err, tc.wantErr)
			}
			got := ""
			if next, err := helm3.Releases.Get("demo", 2); err == nil && next.Info.Status == release.StatusDeployed {
				got = "helm3"
			}
			if next, err := helm4.Releases.Get("demo", 2); err == nil {
				if r, ok := next.(*releasev4.Release); ok && r.Info.Status == rcommon.StatusDeployed {
					if got != "" {
						t.Fatal("both SDKs upgraded the release")
					}
					got = r.ApplyMethod
				}
			}
			if got != tc.wantSDK {
				t.Errorf("revision 2 stored by %q, want %q", got, tc.wantSDK)
			}
		})
	}
}

// fakeConfigs are each SDK's configuration over a memory driver that
// holds installedWeb() as revision 1, stored with apply method method
// (Helm 3's types have none), and a fake kube client.
func fakeConfigs(t *testing.T, method string) (*actionv3.Configuration, *actionv4.Configuration) {
	t.Helper()
	mem3 := driverv3.NewMemory()
	mem3.SetNamespace("apps")
	if err := mem3.Create("sh.helm.release.v1.demo.v1", installedWeb()); err != nil {
		t.Fatal(err)
	}
	kube3 := &kubeV3{updates: &updateErrors{}}
	kube3.Out = io.Discard
	helm3 := &actionv3.Configuration{
		Releases:     storagev3.Init(mem3),
		KubeClient:   kube3,
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}

	raw, err := json.Marshal(installedWeb())
	if err != nil {
		t.Fatal(err)
	}
	var rel releasev4.Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		t.Fatal(err)
	}
	rel.ApplyMethod = method
	mem4 := driverv4.NewMemory()
	mem4.SetNamespace("apps")
	if err := mem4.Create("sh.helm.release.v1.demo.v1", &rel); err != nil {
		t.Fatal(err)
	}
	kube4 := &kubeV4{updates: &updateErrors{}}
	kube4.Out = io.Discard
	helm4 := actionv4.NewConfiguration(actionv4.ConfigurationSetLogger(slog.DiscardHandler))
	helm4.Releases = storagev4.Init(mem4)
	helm4.KubeClient = kube4
	helm4.Capabilities = chartcommon.DefaultCapabilities
	return helm3, helm4
}

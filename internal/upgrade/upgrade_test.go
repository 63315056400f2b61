package upgrade

import (
	"errors"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	kubev3 "helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	storagev4 "helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
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
			if err := checkChartComplete(r); !errors.Is(err, tc.wantErr) {
				t.Errorf("checkChartComplete() = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestAppliedServerSide reads the latest revision from Helm 4's storage,
// here its memory driver, and holds it to the release given.
func TestAppliedServerSide(t *testing.T) {
	for _, tc := range []struct {
		name           string
		edit           func(*releasev4.Release)
		wantServerSide bool
		wantErr        error
	}{
		{"installed by helm 3", func(*releasev4.Release) {}, false, nil},
		{"helm 4, client-side", func(r *releasev4.Release) { r.ApplyMethod = "csa" }, false, nil},
		{"helm 4, server-side", func(r *releasev4.Release) { r.ApplyMethod = "ssa" }, true, nil},
		{"newer revision stored", func(r *releasev4.Release) { r.Version = 2 }, false, ErrReleaseChanged},
		{"manifest rewritten", func(r *releasev4.Release) { r.Manifest += "---\nkind: Secret\n" }, false, ErrReleaseChanged},
		{"values rewritten", func(r *releasev4.Release) { r.Config = map[string]any{"greeting": "pwned"} }, false, ErrReleaseChanged},
		{"values emptied", func(r *releasev4.Release) { r.Config = nil }, false, ErrReleaseChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := web()
			stored := &releasev4.Release{
				Name: given.Name, Namespace: given.Namespace, Version: given.Version, Manifest: given.Manifest,
				Config: map[string]any{"greeting": "hi"},
				Info:   &releasev4.Info{Status: rcommon.StatusDeployed},
			}
			tc.edit(stored)
			mem := driver.NewMemory()
			mem.SetNamespace(given.Namespace)
			cfg := &actionv4.Configuration{Releases: storagev4.Init(mem)}
			if err := cfg.Releases.Create(stored); err != nil {
				t.Fatal(err)
			}
			got, err := appliedServerSide(cfg, given)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("appliedServerSide() error = %v, want %v", err, tc.wantErr)
			}
			if got != tc.wantServerSide {
				t.Errorf("appliedServerSide() = %t, want %t", got, tc.wantServerSide)
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

package render

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/helm-locker/helm-locker/manifest"
)

// helms are the Helms a revision may have been written by.
var helms = []manifest.Helm{manifest.Helm3, manifest.Helm4}

// as is rel as Decode reads it when Helm h wrote it: for Helm 4, rel's
// JSON decoded into Helm 4's types, which leaves a chart's dependencies
// out, as Helm's storage does.
func as(t testing.TB, h manifest.Helm, rel *release.Release) *Release {
	t.Helper()
	if h == manifest.Helm3 {
		return fromHelm3(rel)
	}
	raw, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var v4 releasev4.Release
	if err := json.Unmarshal(raw, &v4); err != nil {
		t.Fatal(err)
	}
	return fromHelm4(&v4)
}

// servedKinds are the kinds the fake cluster serves, and whether they are
// namespaced.
var servedKinds = map[schema.GroupVersionKind]bool{
	{Version: "v1", Kind: "ConfigMap"}:                                       true,
	{Version: "v1", Kind: "Secret"}:                                          true,
	{Version: "v1", Kind: "Namespace"}:                                       false,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}: false,
}

// apiVersions is what a v1.36 cluster serves, as far as the fixtures ask.
var apiVersions = append(chartutil.DefaultVersionSet[:len(chartutil.DefaultVersionSet):len(chartutil.DefaultVersionSet)],
	"policy/v1", "policy/v1/PodDisruptionBudget")

// fakeCluster is a v1.36.3 cluster holding objs.
func fakeCluster(objs ...runtime.Object) (Cluster, *dynamicfake.FakeDynamicClient) {
	mapper := meta.NewDefaultRESTMapper(nil)
	listKinds := map[schema.GroupVersionResource]string{}
	for gvk, namespaced := range servedKinds {
		scope := meta.RESTScopeRoot
		if namespaced {
			scope = meta.RESTScopeNamespace
		}
		mapper.Add(gvk, scope)
		m, _ := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		listKinds[m.Resource] = gvk.Kind + "List"
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...)
	return Cluster{KubeVersion: "v1.36.3", APIVersions: apiVersions, Client: client, Mapper: mapper}, client
}

// objectsIn are the objects a manifest declares, as Helm 3 (which
// install renders as) would have applied them.
func objectsIn(t testing.TB, m string) []runtime.Object {
	objs, err := manifest.ParseRelease(m, manifest.Helm3)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

func loadDashboard(t testing.TB) *chart.Chart {
	ch, err := loader.Load("testdata/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// chartOf is a chart of the given templates, under templates/.
func chartOf(templates map[string]string, values map[string]any) *chart.Chart {
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: "web", Version: "1.0.0"}, Values: values}
	for name, data := range templates {
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/" + name, Data: []byte(data)})
	}
	return ch
}

// releaseOf is revision version of release apps/web.
func releaseOf(ch *chart.Chart, config map[string]any, version int) *release.Release {
	return &release.Release{Name: "web", Namespace: "apps", Version: version, Chart: ch, Config: config,
		Info: &release.Info{Status: release.StatusDeployed}}
}

// install renders rel as Helm 3 installed it, in c, and stores the
// manifest in it.
func install(t testing.TB, rel *release.Release, c Cluster) *release.Release {
	out, err := Render(context.Background(), fromHelm3(rel), c)
	if err != nil {
		t.Fatal(err)
	}
	rel.Manifest = out.Manifest
	return rel
}

// TestRenderIsWhatHelmStores holds Render to each Helm's CLI for charts
// without lookups. The golden files are the output of Helm v3.22.0's and
// v4.3.1's CLIs (the e2e suite's builds, hack/tools.sh):
//
//	helm template web testdata/dashboard -n apps --kube-version v1.36.3 \
//	  --api-versions policy/v1/PodDisruptionBudget --set adminPassword=s3cret --skip-tests
//	helm template web testdata/null-probe -n apps --kube-version v1.36.3 --skip-tests
//	helm template web testdata/kept-blank-line -n apps --kube-version v1.36.3 --skip-tests
//
// which print the release's manifest as Helm stores it (NOTES.txt and the
// test hook left out, documents sorted into install order), trimmed at
// its ends (cmd/template.go: strings.TrimSpace). Helm 3's manifest ends as
// it prints; Helm 4's keeps the line breaks that end its last document,
// which TestRenderAsTheHelmThatWroteIt holds against Helm 4's SDK.
func TestRenderIsWhatHelmStores(t *testing.T) {
	tests := []struct {
		chart  string
		helm   manifest.Helm
		golden string
		config map[string]any
	}{
		{"dashboard", manifest.Helm3, "dashboard-helm-v3.22.0-template.yaml", map[string]any{"adminPassword": "s3cret"}},
		{"dashboard", manifest.Helm4, "dashboard-helm-v4.3.1-template.yaml", map[string]any{"adminPassword": "s3cret"}},
		{"null-probe", manifest.Helm3, "null-probe-helm-v3.22.0-template.yaml", nil},
		{"null-probe", manifest.Helm4, "null-probe-helm-v4.3.1-template.yaml", nil},
		{"kept-blank-line", manifest.Helm3, "kept-blank-line-helm-v3.22.0-template.yaml", nil},
		{"kept-blank-line", manifest.Helm4, "kept-blank-line-helm-v4.3.1-template.yaml", nil},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			want, err := os.ReadFile("testdata/" + tt.golden)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := loader.Load("testdata/" + tt.chart)
			if err != nil {
				t.Fatal(err)
			}
			c, client := fakeCluster()
			out, err := Render(context.Background(), as(t, tt.helm, releaseOf(ch, tt.config, 1)), c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), strings.TrimSpace(out.Manifest)+"\n"); diff != "" {
				t.Errorf("manifest (-helm +Render):\n%s", diff)
			}
			if len(out.Lookups) != 0 || len(client.Actions()) != 0 {
				t.Errorf("lookups %v, requests %v; want none", out.Lookups, client.Actions())
			}
		})
	}
}

func TestRenderRelease(t *testing.T) {
	ch := chartOf(map[string]string{"release.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: release
  namespace: {{ .Release.Namespace }}
data:
  name: {{ .Release.Name }}
  revision: {{ .Release.Revision | quote }}
  install: {{ .Release.IsInstall | quote }}
  upgrade: {{ .Release.IsUpgrade | quote }}
  service: {{ .Release.Service }}
`}, nil)
	// What Helm stores for each revision: install renders revision 1,
	// each upgrade the next.
	tests := []struct {
		revision    int
		description string
		want        string
	}{
		{1, "Install complete", `  revision: "1"
  install: "true"
  upgrade: "false"
`},
		{2, "Upgrade complete", `  revision: "2"
  install: "false"
  upgrade: "true"
`},
		{3, "Upgrade complete", `  revision: "3"
  install: "false"
  upgrade: "true"
`},
		// A rollback stores the manifest of the revision it rolled
		// back to, rendered at that revision.
		{4, "Rollback to 1", `  revision: "1"
  install: "true"
  upgrade: "false"
`},
		{5, "Rollback to 3", `  revision: "3"
  install: "false"
  upgrade: "true"
`},
		{6, "Rollback to 9", `  revision: "6"
  install: "false"
  upgrade: "true"
`},
	}
	c, _ := fakeCluster()
	for _, h := range helms {
		for _, tt := range tests {
			rel := releaseOf(ch, nil, tt.revision)
			rel.Info = &release.Info{Description: tt.description}
			out, err := Render(context.Background(), as(t, h, rel), c)
			if err != nil {
				t.Fatal(err)
			}
			want := "---\n# Source: web/templates/release.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: release\n  namespace: apps\ndata:\n  name: web\n" + tt.want + "  service: Helm\n"
			if diff := cmp.Diff(want, trimmed(out.Manifest)); diff != "" {
				t.Errorf("%s, revision %d, %q (-want +got):\n%s", h, tt.revision, tt.description, diff)
			}
		}
	}
}

// trimmed is a manifest without the line breaks Helm 4 keeps at the end
// of its last document, as Helm 3 stores it.
func trimmed(m string) string { return strings.TrimRight(m, "\n") + "\n" }

// decoded is the release rel holds, in its Helm's types.
func decoded(rel *Release) any {
	switch s := rel.sdk.(type) {
	case helm3:
		return s.rel
	case helm4:
		return s.rel
	}
	return nil
}

func TestRenderLookups(t *testing.T) {
	ch := chartOf(map[string]string{"found.yaml": `
{{- $cm := lookup "v1" "ConfigMap" "apps" "settings" }}
{{- $missing := lookup "v1" "ConfigMap" "apps" "missing" }}
{{- $cms := lookup "v1" "ConfigMap" "apps" "" }}
{{- $ns := lookup "v1" "Namespace" "" "apps" }}
{{- $nss := lookup "v1" "Namespace" "" "" }}
{{- $again := lookup "v1" "ConfigMap" "apps" "settings" }}
{{- $role := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "apps" "admin" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: found
data:
  setting: {{ $cm.data.key | quote }}
  missing: {{ $missing | toJson | quote }}
  configMaps: {{ len $cms.items | quote }}
  namespace: {{ $ns.metadata.name | quote }}
  namespaces: {{ len $nss.items | quote }}
  role: {{ $role | toJson | quote }}
`}, nil)
	c, client := fakeCluster(objectsIn(t, `
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: apps}
data: {key: from-the-cluster}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: elsewhere, namespace: other}
`)...)
	for _, h := range helms {
		t.Run(h.String(), func(t *testing.T) {
			client.ClearActions()
			testRenderLookups(t, as(t, h, releaseOf(ch, nil, 1)), c, client)
		})
	}
}

func testRenderLookups(t *testing.T, rel *Release, c Cluster, client *dynamicfake.FakeDynamicClient) {
	out, err := Render(context.Background(), rel, c)
	if err != nil {
		t.Fatal(err)
	}
	// NotFound is an empty map, as in Helm; a cluster-scoped kind is read
	// without the namespace the template gave.
	want := `  setting: "from-the-cluster"
  missing: "{}"
  configMaps: "1"
  namespace: "apps"
  namespaces: "2"
  role: "{}"
`
	if !strings.HasSuffix(trimmed(out.Manifest), want) {
		t.Errorf("manifest\n%s\nwant it to end with\n%s", out.Manifest, want)
	}
	var got []string
	for _, l := range out.Lookups {
		got = append(got, l.String())
	}
	wantLookups := []string{"ConfigMap apps/settings", "ConfigMap apps/missing", "ConfigMaps in apps", "Namespace apps", "Namespaces", "ClusterRole admin"}
	if diff := cmp.Diff(wantLookups, got); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
	if gvr := out.Lookups[5].GVR; gvr != (schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}) || out.Lookups[5].Namespace != "" {
		t.Errorf("ClusterRole lookup %+v, want cluster-scoped clusterroles", out.Lookups[5])
	}
	// Each lookup reads, as Helm's does; only the record is deduplicated.
	if n := len(client.Actions()); n != 7 {
		t.Errorf("%d requests, want 7: %v", n, client.Actions())
	}
}

func TestRenderLookupErrors(t *testing.T) {
	forbidden := func(verb, resource string) func(*dynamicfake.FakeDynamicClient) {
		return func(c *dynamicfake.FakeDynamicClient) {
			c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New(`User "system:serviceaccount:apps:deployer" cannot`))
			})
		}
	}
	tests := []struct {
		name     string
		template string
		react    func(*dynamicfake.FakeDynamicClient)
		want     Lookup
		requests int
		is       func(error) bool
	}{
		{
			name: "forbidden get, inside an include",
			template: `{{- define "web.password" }}{{ lookup "v1" "Secret" .Release.Namespace "web" | toJson }}{{ end }}
{{- $pw := include "web.password" . }}
{{- $cm := lookup "v1" "ConfigMap" "apps" "settings" }}`,
			react:    forbidden("get", "secrets"),
			want:     Lookup{GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret", Namespace: "apps", Name: "web"},
			requests: 1,
			is:       apierrors.IsForbidden,
		},
		{
			name: "forbidden list, inside tpl",
			template: `{{- $cms := tpl "{{ lookup \"v1\" \"ConfigMap\" \"apps\" \"\" }}" . }}
{{- $ns := lookup "v1" "Namespace" "" "apps" }}`,
			react:    forbidden("list", "configmaps"),
			want:     Lookup{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespace: "apps"},
			requests: 1,
			is:       apierrors.IsForbidden,
		},
		{
			name:     "kind not served",
			template: `{{- $w := lookup "example.com/v1" "Widget" "apps" "w" }}{{- $ns := lookup "v1" "Namespace" "" "apps" }}`,
			want:     Lookup{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1"}, Kind: "Widget", Namespace: "apps", Name: "w"},
			requests: 0,
			is:       meta.IsNoMatchError,
		},
	}
	for _, h := range helms {
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				c, client := fakeCluster()
				if tt.react != nil {
					tt.react(client)
				}
				_, err := Render(context.Background(), as(t, h, releaseOf(chartOf(map[string]string{"a.yaml": tt.template}, nil), nil, 1)), c)
				var le *LookupError
				if !errors.As(err, &le) {
					t.Fatalf("Render error %v, want a *LookupError", err)
				}
				if le.Lookup != tt.want {
					t.Errorf("LookupError names %+v, want %+v", le.Lookup, tt.want)
				}
				if !tt.is(err) {
					t.Errorf("error %v is not the client's", err)
				}
				if !strings.Contains(err.Error(), tt.want.String()) {
					t.Errorf("error %q does not name %s", err, tt.want)
				}
				if n := len(client.Actions()); n != tt.requests {
					t.Errorf("%d requests, want %d: nothing is read after a lookup fails", n, tt.requests)
				}
			})
		}
	}
}

func TestRenderCapabilities(t *testing.T) {
	ch := chartOf(map[string]string{"caps.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: caps
data:
  version: {{ .Capabilities.KubeVersion.Version }}
  major: {{ .Capabilities.KubeVersion.Major | quote }}
  minor: {{ .Capabilities.KubeVersion.Minor | quote }}
  pdb: {{ if .Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget" }}policy/v1{{ else }}policy/v1beta1{{ end }}
  recent: {{ semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version | quote }}
`}, nil)
	tests := []struct {
		name        string
		kubeVersion string
		apiVersions []string
		want        string
	}{
		{"v1.36", "v1.36.3", apiVersions, `  version: v1.36.3
  major: "1"
  minor: "36"
  pdb: policy/v1
  recent: "true"
`},
		// GitVersion is kept as discovery gives it, build metadata and all.
		{"v1.24 on EKS", "v1.24.17-eks-c5f0f95", []string{"v1", "policy/v1beta1", "policy/v1beta1/PodDisruptionBudget"}, `  version: v1.24.17-eks-c5f0f95
  major: "1"
  minor: "24"
  pdb: policy/v1beta1
  recent: "false"
`},
	}
	for _, h := range helms {
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				c, _ := fakeCluster()
				c.KubeVersion, c.APIVersions = tt.kubeVersion, tt.apiVersions
				out, err := Render(context.Background(), as(t, h, releaseOf(ch, nil, 1)), c)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasSuffix(trimmed(out.Manifest), tt.want) {
					t.Errorf("manifest\n%s\nwant it to end with\n%s", out.Manifest, tt.want)
				}
			})
		}

		t.Run(h.String()+"/chart's kubeVersion", func(t *testing.T) {
			c, _ := fakeCluster()
			c.KubeVersion = "v1.24.17"
			_, err := Render(context.Background(), as(t, h, releaseOf(loadDashboard(t), nil, 1)), c)
			if err == nil || !strings.Contains(err.Error(), "chart dashboard-8.5.1 requires kubeVersion: >=1.25.0-0 which is incompatible with Kubernetes v1.24.17") {
				t.Errorf("Render on v1.24 = %v, want the chart's kubeVersion refused", err)
			}
			c.KubeVersion = ""
			if _, err := Render(context.Background(), as(t, h, releaseOf(loadDashboard(t), nil, 1)), c); err == nil {
				t.Error("Render with no Kubernetes version succeeded")
			}
		})
	}
}

func TestRenderReadsCapabilities(t *testing.T) {
	tests := []struct {
		name                 string
		templates            map[string]string
		apiVersions, version bool
	}{
		{"neither", map[string]string{"a.yaml": "# {{ .Capabilities.HelmVersion.Version }}"}, false, false},
		{"API versions, in a helper", map[string]string{"_helpers.tpl": `{{ define "x" }}{{ $.Capabilities.APIVersions.Has "policy/v1" }}{{ end }}`}, true, false},
		{"Kubernetes version", map[string]string{"a.yaml": "# {{ .Capabilities.KubeVersion.Minor }}"}, false, true},
		{"both", map[string]string{"a.yaml": "# {{ .Capabilities.KubeVersion }}", "b.yaml": `# {{ .Capabilities.APIVersions.Has "v1" }}`}, true, true},
	}
	c, _ := fakeCluster()
	for _, h := range helms {
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				out, err := Render(context.Background(), as(t, h, releaseOf(chartOf(tt.templates, nil), nil, 1)), c)
				if err != nil {
					t.Fatal(err)
				}
				if out.ReadsAPIVersions != tt.apiVersions || out.ReadsKubeVersion != tt.version {
					t.Errorf("ReadsAPIVersions, ReadsKubeVersion = %v, %v; want %v, %v", out.ReadsAPIVersions, out.ReadsKubeVersion, tt.apiVersions, tt.version)
				}
			})
		}
	}
}

// TestRenderDependencies: Helm stores a chart without its dependencies,
// so Render renders a chart as stored, even one loaded with them (which
// only a Helm 3 release built in memory can be: Helm 4's is decoded from
// JSON here, which leaves them out).
func TestRenderDependencies(t *testing.T) {
	for _, h := range helms {
		t.Run(h.String(), func(t *testing.T) { testRenderDependencies(t, h) })
	}
}

func testRenderDependencies(t *testing.T, h manifest.Helm) {
	configMap := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n"
	t.Run("library", func(t *testing.T) {
		ch := chartOf(map[string]string{"cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: web
  labels: {{- include "common.labels" . | nindent 4 }}
`}, nil)
		ch.Metadata.Dependencies = []*chart.Dependency{{Name: "common", Version: "2.x.x", Repository: "oci://registry-1.docker.io/bitnamicharts"}}
		lib := chartOf(map[string]string{"_labels.tpl": `{{ define "common.labels" }}app: web{{ end }}`}, nil)
		lib.Metadata.Name, lib.Metadata.Type, lib.Metadata.Version = "common", "library", "2.31.0"
		ch.AddDependency(lib)

		c, _ := fakeCluster()
		_, err := Render(context.Background(), as(t, h, releaseOf(ch, nil, 1)), c)
		var nr *NotRenderableError
		if !errors.As(err, &nr) {
			t.Fatalf("Render error %v, want a *NotRenderableError", err)
		}
		if nr.Chart != "web-1.0.0" || !cmp.Equal(nr.Dependencies, []string{"common"}) {
			t.Errorf("NotRenderableError names %s %v, want web-1.0.0 [common]", nr.Chart, nr.Dependencies)
		}
		if len(ch.Dependencies()) != 1 || lib.Parent() != ch {
			t.Error("Render changed the chart's dependencies")
		}
	})
	t.Run("subchart", func(t *testing.T) {
		ch := chartOf(map[string]string{"cm.yaml": strings.Replace(configMap, "%s", "web", 1)}, nil)
		ch.Metadata.Dependencies = []*chart.Dependency{{Name: "redis", Version: "20.x.x"}}
		sub := chartOf(map[string]string{"cm.yaml": strings.Replace(configMap, "%s", "redis", 1)}, nil)
		sub.Metadata.Name = "redis"
		ch.AddDependency(sub)

		c, _ := fakeCluster()
		out, err := Render(context.Background(), as(t, h, releaseOf(ch, nil, 1)), c)
		if err != nil {
			t.Fatal(err)
		}
		if want := "---\n# Source: web/templates/cm.yaml\n" + strings.Replace(configMap, "%s", "web", 1); trimmed(out.Manifest) != want {
			t.Errorf("manifest\n%s\nwant only the parent's\n%s", out.Manifest, want)
		}
	})
}

// TestRenderLeavesReleaseAlone: Helm writes into a chart's values when it
// reuses them, into its dependency metadata when it processes aliases,
// and a template's `set` writes into the values it is given.
func TestRenderLeavesReleaseAlone(t *testing.T) {
	ch := chartOf(map[string]string{"cm.yaml": `
{{- $_ := set .Values.nested "added" "by the template" }}
{{- $_ := set .Values.user "added" "by the template" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
data:
  nested: {{ .Values.nested | toJson | quote }}
`}, map[string]any{"nested": map[string]any{"a": "1"}, "list": []any{map[string]any{"b": "2"}}, "dropped": "chart"})
	ch.Metadata.Dependencies = []*chart.Dependency{{Name: "redis", Alias: "cache", Version: "20.x.x", Condition: "cache.enabled"}}
	c, _ := fakeCluster()
	for _, h := range helms {
		rel := as(t, h, releaseOf(ch, map[string]any{"user": map[string]any{"c": "3"}, "dropped": nil}, 2))
		before, err := json.Marshal(decoded(rel))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Render(context.Background(), rel, c); err != nil {
			t.Fatal(err)
		}
		after, _ := json.Marshal(decoded(rel))
		if diff := cmp.Diff(string(before), string(after)); diff != "" {
			t.Errorf("Render changed the %s release (-before +after):\n%s", h, diff)
		}
	}
}

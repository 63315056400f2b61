package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/spf13/pflag"
)

// chartDir is the operator's Helm chart.
var chartDir = filepath.Join("..", "..", "deploy", "chart", "helm-locker")

// notChartValues are the flags the chart sets from elsewhere, and why.
var notChartValues = map[string]string{
	"config":     "the chart passes flags, not a file",
	"kubeconfig": "in a cluster the locker uses its pod's ServiceAccount",
	"namespace":  "the registration namespace is the release's namespace",
	"node-name":  "set from the pod's spec.nodeName, in the environment",
}

// chartDefaults are the flags whose chart default is not the binary's,
// and why.
var chartDefaults = map[string]string{
	// The chart installs the CRDs from crds/.
	"install-crds": "false",
	// Least privilege: every write takes a ServiceAccount's identity.
	"default-service-account": "helm-locker-writer",
}

// TestChartValuesCoverEveryFlag holds the chart to the flags: each flag
// has a value that sets it, so a flag added without one fails here.
func TestChartValuesCoverEveryFlag(t *testing.T) {
	cases := map[string]struct {
		values map[string]any
		want   string
	}{
		"controller-name":             {map[string]any{"controllerName": "other"}, "other"},
		"workers":                     {map[string]any{"workers": 8}, "8"},
		"kube-api-qps":                {map[string]any{"kubeApiQps": 50}, "50"},
		"kube-api-burst":              {map[string]any{"kubeApiBurst": 100}, "100"},
		"helm-field-managers":         {map[string]any{"helmFieldManagers": []any{"helm", "my-helm"}}, "[helm,my-helm]"},
		"helm-operation-timeout":      {map[string]any{"helmOperationTimeout": "30m"}, "30m0s"},
		"tenant-manifest-locks":       {map[string]any{"tenantManifestLocks": false}, "false"},
		"install-crds":                {map[string]any{"installCRDs": true}, "true"},
		"default-service-account":     {map[string]any{"defaultServiceAccount": "deployer"}, "deployer"},
		"leader-elect":                {map[string]any{"leaderElection": map[string]any{"enabled": false}}, "false"},
		"leader-elect-lease-duration": {map[string]any{"leaderElection": map[string]any{"leaseDuration": "30s"}}, "30s"},
		"leader-elect-renew-deadline": {map[string]any{"leaderElection": map[string]any{"renewDeadline": "20s"}}, "20s"},
		"leader-elect-retry-period":   {map[string]any{"leaderElection": map[string]any{"retryPeriod": "5s"}}, "5s"},
		"metrics-bind-address":        {map[string]any{"metrics": map[string]any{"port": 9090}}, ":9090"},
		"profiling":                   {map[string]any{"metrics": map[string]any{"profiling": true}}, "true"},
		"health-probe-bind-address":   {map[string]any{"probes": map[string]any{"port": 9091}}, ":9091"},
		"webhook-bind-address":        {map[string]any{"webhook": map[string]any{"enabled": false}}, "0"},
		"webhook-url":                 {map[string]any{"webhook": map[string]any{"url": "https://10.0.0.1:9443/validate"}}, "https://10.0.0.1:9443/validate"},
		"webhook-cert-dir":            {map[string]any{"webhook": map[string]any{"certSecret": "webhook-tls"}}, "/etc/helm-locker/webhook"},
		"prevent-exempt-groups":       {map[string]any{"webhook": map[string]any{"exemptGroups": []any{"ops", "sre"}}}, "[ops,sre]"},
		"log-format":                  {map[string]any{"log": map[string]any{"format": "json"}}, "json"},
		"v":                           {map[string]any{"log": map[string]any{"verbosity": 4}}, "4"},
	}
	for _, name := range operatorFlags() {
		if _, ok := notChartValues[name]; ok {
			continue
		}
		c, ok := cases[name]
		if !ok {
			t.Errorf("--%s has no chart value: add one to deploy/chart/helm-locker (values.yaml and the Deployment's args) and a case here", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			f := parseArgs(t, containerArgs(t, renderChart(t, c.values)))
			if got := f.Lookup(name).Value.String(); got != c.want {
				t.Errorf("--%s = %q, want %q", name, got, c.want)
			}
		})
	}
}

// TestChartDefaultsAreTheFlagsDefaults: a chart installed with no values
// runs the binary's defaults, but for the few chartDefaults.
func TestChartDefaultsAreTheFlagsDefaults(t *testing.T) {
	args := containerArgs(t, renderChart(t, nil))
	f := parseArgs(t, args)
	if got := f.Lookup("namespace").Value.String(); got != "registration" {
		t.Errorf("--namespace = %q, want the release's namespace", got)
	}
	f.VisitAll(func(fl *pflag.Flag) {
		if _, ok := notChartValues[fl.Name]; ok {
			return
		}
		want := fl.DefValue
		if d, ok := chartDefaults[fl.Name]; ok {
			want = d
		}
		if got := fl.Value.String(); got != want {
			t.Errorf("the chart's default --%s is %q, the binary's %q", fl.Name, got, want)
		}
	})
}

// TestChartRunsRestricted holds the pod to the restricted Pod Security
// Standard, and to the probes and replicas the README promises.
func TestChartRunsRestricted(t *testing.T) {
	out := renderChart(t, nil)
	d := deployment(t, out)
	pod, c := d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2 with leader election", d.Spec.Replicas)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want no privilege escalation, a read-only root and all capabilities dropped", sc)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("want probes on /healthz and /readyz")
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	for _, name := range []string{"poddisruptionbudget.yaml", "service.yaml"} {
		if strings.TrimSpace(out[filepath.Join("helm-locker", "templates", name)]) == "" {
			t.Errorf("templates/%s renders nothing with the default values", name)
		}
	}
	if !strings.Contains(out["helm-locker/templates/service.yaml"], "name: helm-locker-webhook") {
		t.Error("no webhook Service helm-locker-webhook, which the locker's webhook configuration names")
	}
	if strings.TrimSpace(out["helm-locker/templates/servicemonitor.yaml"]) != "" {
		t.Error("a ServiceMonitor by default: it needs the Prometheus Operator's CRDs")
	}
}

// TestChartRBAC holds the default ClusterRole to least privilege: it reads
// everything and writes no Secret, no RBAC object and nothing by wildcard;
// rbac.writeAll is the explicit way to more.
func TestChartRBAC(t *testing.T) {
	writes := func(r rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(r.Verbs, func(v string) bool {
			return v == "*" || v == "create" || v == "update" || v == "patch" || v == "delete" || v == "escalate" || v == "bind"
		})
	}
	for _, tt := range []struct {
		name     string
		values   map[string]any
		writeAll bool
	}{
		{name: "default", values: nil},
		{name: "with CRD installs", values: map[string]any{"installCRDs": true}},
		{name: "writeAll", values: map[string]any{"rbac": map[string]any{"writeAll": true}}, writeAll: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := renderChart(t, tt.values)
			role := clusterRole(t, out)
			wide := false
			readsAll := false
			for _, r := range role.Rules {
				if slices.Contains(r.APIGroups, "*") && slices.Contains(r.Resources, "*") && slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
					readsAll = true
				}
				if !writes(r) {
					continue
				}
				if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, "secrets") ||
					slices.Contains(r.APIGroups, "rbac.authorization.k8s.io") {
					wide = true
				}
				if slices.Contains(r.Resources, "customresourcedefinitions") && !tt.writeAll && tt.values == nil {
					t.Errorf("rule %+v writes CRDs though the chart installs them", r)
				}
			}
			if !readsAll {
				t.Error("the ClusterRole does not read every type; a locked chart may hold any kind")
			}
			if wide != tt.writeAll {
				t.Errorf("wide write access = %v, want %v (rules %+v)", wide, tt.writeAll, role.Rules)
			}
			sa := parseArgs(t, containerArgs(t, out)).Lookup("default-service-account").Value.String()
			if want := map[bool]string{false: "helm-locker-writer", true: ""}[tt.writeAll]; sa != want {
				t.Errorf("--default-service-account = %q, want %q", sa, want)
			}
		})
	}
}

// operatorFlags are the names of the flags the operator takes.
func operatorFlags() []string {
	root := newRootCommand()
	var names []string
	collect := func(f *pflag.Flag) { names = append(names, f.Name) }
	root.PersistentFlags().VisitAll(collect)
	root.Flags().VisitAll(collect)
	return names
}

// parseArgs parses args with the operator's own flags, as the binary would.
func parseArgs(t *testing.T, args []string) *pflag.FlagSet {
	t.Helper()
	root := newRootCommand()
	f := root.Flags()
	f.AddFlagSet(root.PersistentFlags())
	if err := f.Parse(args); err != nil {
		t.Fatalf("the chart's args %q: %v", args, err)
	}
	return f
}

// renderChart renders the chart as `helm install hl -n registration` would
// with values.
func renderChart(t *testing.T, values map[string]any) map[string]string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "hl", Namespace: "registration", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func deployment(t *testing.T, out map[string]string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict([]byte(out["helm-locker/templates/deployment.yaml"]), d); err != nil {
		t.Fatalf("the chart's Deployment: %v", err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the chart's Deployment has %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d
}

func containerArgs(t *testing.T, out map[string]string) []string {
	t.Helper()
	return deployment(t, out).Spec.Template.Spec.Containers[0].Args
}

// clusterRole is the locker's own ClusterRole, the first document of
// templates/rbac.yaml.
func clusterRole(t *testing.T, out map[string]string) *rbacv1.ClusterRole {
	t.Helper()
	doc, _, _ := strings.Cut(out["helm-locker/templates/rbac.yaml"], "\n---")
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil || role.Kind != "ClusterRole" {
		t.Fatalf("the chart's ClusterRole (%v): %s", err, doc)
	}
	return role
}

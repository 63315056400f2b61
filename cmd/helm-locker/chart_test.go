package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
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
		"controller-name":               {map[string]any{"controllerName": "other"}, "other"},
		"workers":                       {map[string]any{"workers": 8}, "8"},
		"kube-api-qps":                  {map[string]any{"kubeApiQps": 50}, "50"},
		"kube-api-burst":                {map[string]any{"kubeApiBurst": 100}, "100"},
		"helm-field-managers":           {map[string]any{"helmFieldManagers": []any{"helm", "my-helm"}}, "[helm,my-helm]"},
		"helm-operation-timeout":        {map[string]any{"helmOperationTimeout": "30m"}, "30m0s"},
		"tenant-manifest-locks":         {map[string]any{"tenantManifestLocks": false}, "false"},
		"install-crds":                  {map[string]any{"installCRDs": true}, "true"},
		"default-service-account":       {map[string]any{"defaultServiceAccount": "deployer"}, "deployer"},
		"default-rerender":              {map[string]any{"defaultRerender": "Report"}, "Report"},
		"rerender-upgrade-interval":     {map[string]any{"rerenderUpgradeInterval": "5m"}, "5m0s"},
		"rerender-upgrade-max-per-hour": {map[string]any{"rerenderUpgradeMaxPerHour": 3}, "3"},
		"render-timeout":                {map[string]any{"renderTimeout": "30s"}, "30s"},
		"render-memory-limit":           {map[string]any{"renderMemoryLimit": "512Mi"}, "512Mi"},
		"artifact-max-download":         {map[string]any{"artifactMaxDownload": "1Gi"}, "1Gi"},
		"artifact-max-unpacked":         {map[string]any{"artifactMaxUnpacked": "2Gi"}, "2Gi"},
		"artifact-max-files":            {map[string]any{"artifactMaxFiles": 20}, "20"},
		"watch-label-selector":          {map[string]any{"shards": []any{"a"}}, "sharding.helm-locker.io/shard=a"},
		"leader-elect-lease-name":       {map[string]any{"shards": []any{"a"}}, "helm-locker-a"},
		"webhook-service":               {map[string]any{"shards": []any{"a"}}, "helm-locker-webhook-a"},
		"leader-elect":                  {map[string]any{"leaderElection": map[string]any{"enabled": false}}, "false"},
		"leader-elect-lease-duration":   {map[string]any{"leaderElection": map[string]any{"leaseDuration": "30s"}}, "30s"},
		"leader-elect-renew-deadline":   {map[string]any{"leaderElection": map[string]any{"renewDeadline": "20s"}}, "20s"},
		"leader-elect-retry-period":     {map[string]any{"leaderElection": map[string]any{"retryPeriod": "5s"}}, "5s"},
		"metrics-bind-address":          {map[string]any{"metrics": map[string]any{"port": 9090}}, ":9090"},
		"profiling":                     {map[string]any{"metrics": map[string]any{"profiling": true}}, "true"},
		"health-probe-bind-address":     {map[string]any{"probes": map[string]any{"port": 9091}}, ":9091"},
		"webhook-bind-address":          {map[string]any{"webhook": map[string]any{"enabled": false}}, "0"},
		"webhook-url":                   {map[string]any{"webhook": map[string]any{"url": "https://10.0.0.1:9443/validate"}}, "https://10.0.0.1:9443/validate"},
		"webhook-cert-dir":              {map[string]any{"webhook": map[string]any{"certSecret": "webhook-tls"}}, "/etc/helm-locker/webhook"},
		"prevent-exempt-groups":         {map[string]any{"webhook": map[string]any{"exemptGroups": []any{"ops", "sre"}}}, "[ops,sre]"},
		"log-format":                    {map[string]any{"log": map[string]any{"format": "json"}}, "json"},
		"v":                             {map[string]any{"log": map[string]any{"verbosity": 4}}, "4"},
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
// Standard, and to the probes and replicas docs/operating.md promises.
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

// TestChartRBAC holds the chart's RBAC to least privilege. By default the
// ClusterRole:
//   - reads no type by wildcard and no subresource, so neither pods/exec,
//     pods/attach, pods/portforward nor nodes/proxy, yet every type the
//     locker reads for itself, every kind the chart itself renders (the
//     self-lock holds them) and every built-in kind of the e2e charts;
//   - writes no Secret, no RBAC object and nothing by wildcard;
//   - impersonates only the default writer (and the self-lock's account),
//     not kube-system's controllers.
//
// rbac.writeAll and rbac.readAll are the explicit ways to more.
func TestChartRBAC(t *testing.T) {
	writes := func(r rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(r.Verbs, func(v string) bool {
			return v == "*" || v == "create" || v == "update" || v == "patch" || v == "delete" || v == "escalate" || v == "bind"
		})
	}
	// What the locker reads for itself: release Secrets, ManifestLock
	// sources, namespaces, ServiceAccounts (a tenant writer's opt-in), CRDs,
	// its CRs, and Flux's sources that ManifestLocks' sourceRef and
	// HelmReleases' chartRef name.
	own := []schema.GroupResource{
		{Resource: "secrets"}, {Resource: "configmaps"}, {Resource: "namespaces"}, {Resource: "serviceaccounts"},
		{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Group: "helm.cattle.io", Resource: "helmreleases"}, {Group: "helm-locker.io", Resource: "manifestlocks"},
	}
	for _, r := range []string{"buckets", "externalartifacts", "gitrepositories", "helmcharts", "ocirepositories"} {
		own = append(own, schema.GroupResource{Group: mlv1.SourceGroup, Resource: r})
	}
	fixtures := fixtureChartKinds(t)
	for _, tt := range []struct {
		name     string
		values   map[string]any
		writeAll bool
	}{
		{name: "default", values: nil},
		{name: "with CRD installs", values: map[string]any{"installCRDs": true}},
		{name: "writeAll", values: map[string]any{"rbac": map[string]any{"writeAll": true}}, writeAll: true},
		{name: "selfLock with every object", values: map[string]any{"selfLock": map[string]any{"enabled": true},
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}, "podDisruptionBudget": map[string]any{"enabled": true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := renderChart(t, tt.values)
			role := clusterRole(t, out)
			wide := false
			for _, r := range role.Rules {
				if slices.ContainsFunc(r.Verbs, func(v string) bool { return v == "get" || v == "list" || v == "watch" || v == "*" }) &&
					(slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*")) {
					t.Errorf("rule %+v reads by wildcard; rbac.readAll is the explicit way", r)
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
			if wide != tt.writeAll {
				t.Errorf("wide write access = %v, want %v (rules %+v)", wide, tt.writeAll, role.Rules)
			}
			for _, sub := range []string{"pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "services/proxy", "nodes/proxy"} {
				for _, verb := range []string{"get", "create"} {
					if !tt.writeAll && grants(role.Rules, verb, "", sub, "x") {
						t.Errorf("the ClusterRole grants %s on %s", verb, sub)
					}
				}
			}
			readable := append(slices.Clone(own), fixtures...)
			readable = append(readable, renderedKinds(t, out)...)
			for _, gr := range readable {
				for _, verb := range []string{"get", "list", "watch"} {
					if !grants(role.Rules, verb, gr.Group, gr.Resource, "") {
						t.Errorf("the ClusterRole does not %s %s: a lock holding one says WatchForbidden", verb, gr)
						break
					}
				}
			}
			if grants(role.Rules, "impersonate", "", "serviceaccounts", "generic-garbage-collector") {
				t.Error("the ClusterRole impersonates any ServiceAccount, kube-system's controllers included")
			}
			if !tt.writeAll && !grants(role.Rules, "impersonate", "", "serviceaccounts", "helm-locker-writer") {
				t.Error("the ClusterRole does not impersonate the default writer helm-locker-writer")
			}
			// The chart creates the webhook configuration; the locker
			// gets, watches and updates its own by name, since RBAC
			// cannot limit create to a name.
			const admissionGroup, configs = "admissionregistration.k8s.io", "validatingwebhookconfigurations"
			for _, verb := range []string{"get", "list", "watch", "update"} {
				if !grants(role.Rules, verb, admissionGroup, configs, "helm-locker.registration") {
					t.Errorf("the ClusterRole does not %s the webhook configuration helm-locker.registration", verb)
				}
			}
			if !tt.writeAll && (grants(role.Rules, "create", admissionGroup, configs, "") || grants(role.Rules, "update", admissionGroup, configs, "another")) {
				t.Error("the ClusterRole creates webhook configurations, or updates others than its own")
			}
			sa := parseArgs(t, containerArgs(t, out)).Lookup("default-service-account").Value.String()
			if want := map[bool]string{false: "helm-locker-writer", true: ""}[tt.writeAll]; sa != want {
				t.Errorf("--default-service-account = %q, want %q", sa, want)
			}
		})
	}
}

// TestChartRBACValues: rbac.readAll, rbac.extraReadRules and
// rbac.impersonate widen or narrow what the locker may do, as values.yaml
// says; a read rule that would reach every core resource is refused.
func TestChartRBACValues(t *testing.T) {
	rbac := func(v map[string]any) map[string]any { return map[string]any{"rbac": v} }

	all := clusterRole(t, renderChart(t, rbac(map[string]any{"readAll": true}))).Rules
	if !grants(all, "watch", "example.com", "gizmos", "") {
		t.Error("rbac.readAll=true: the ClusterRole does not read every type")
	}

	extra := clusterRole(t, renderChart(t, rbac(map[string]any{"extraReadRules": []any{
		map[string]any{"apiGroups": []any{"example.com"}, "resources": []any{"gizmos"}, "verbs": []any{"delete"}},
	}}))).Rules
	if !grants(extra, "watch", "example.com", "gizmos", "") || grants(extra, "delete", "example.com", "gizmos", "x") {
		t.Error("rbac.extraReadRules: want get, list and watch on gizmos.example.com, and only those")
	}
	if !grants(extra, "watch", "apps", "deployments", "") {
		t.Error("rbac.extraReadRules replaced the default readRules")
	}
	for _, rule := range []map[string]any{
		{"apiGroups": []any{""}, "resources": []any{"*"}},
		{"apiGroups": []any{"*"}, "resources": []any{"widgets"}},
	} {
		if _, err := renderChartE(rbac(map[string]any{"extraReadRules": []any{rule}})); err == nil || !strings.Contains(err.Error(), "rbac.readAll") {
			t.Errorf("read rule %v: err = %v, want a refusal naming rbac.readAll", rule, err)
		}
	}

	anyName := clusterRole(t, renderChart(t, rbac(map[string]any{"impersonate": map[string]any{"serviceAccounts": []any{"*"}}}))).Rules
	if !grants(anyName, "impersonate", "", "serviceaccounts", "generic-garbage-collector") {
		t.Error(`rbac.impersonate.serviceAccounts=["*"]: want any ServiceAccount`)
	}

	out := renderChart(t, map[string]any{"selfLock": map[string]any{"enabled": true},
		"rbac": map[string]any{"impersonate": map[string]any{"namespaces": []any{"apps", "shop"}, "serviceAccounts": []any{"deployer"}}}})
	if grants(clusterRole(t, out).Rules, "impersonate", "", "serviceaccounts", "helm-locker-writer") {
		t.Error("rbac.impersonate.namespaces: the ClusterRole still impersonates in every namespace")
	}
	roles, bound := map[string][]rbacv1.PolicyRule{}, map[string]bool{}
	for _, doc := range documents(out["helm-locker/templates/rbac.yaml"]) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			if r.Name == "hl-helm-locker-impersonate" {
				roles[r.Namespace] = r.Rules
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			if b.RoleRef.Name == "hl-helm-locker-impersonate" && len(b.Subjects) == 1 && b.Subjects[0].Name == "hl-helm-locker" && b.Subjects[0].Namespace == "registration" {
				bound[b.Namespace] = true
			}
		}
	}
	// The chart's own namespace is added: the self-lock's account and an
	// admin's ManifestLocks write from there.
	for _, ns := range []string{"apps", "shop", "registration"} {
		if !bound[ns] {
			t.Errorf("namespace %s: no RoleBinding of the locker to hl-helm-locker-impersonate", ns)
		}
		for _, sa := range []string{"deployer", "helm-locker-writer", "hl-helm-locker-self"} {
			if !grants(roles[ns], "impersonate", "", "serviceaccounts", sa) {
				t.Errorf("namespace %s: the locker may not impersonate %s", ns, sa)
			}
		}
		if grants(roles[ns], "impersonate", "", "serviceaccounts", "default") {
			t.Errorf("namespace %s: the locker may impersonate any ServiceAccount", ns)
		}
	}
	if len(roles) != 3 {
		t.Errorf("impersonation Roles in %v, want apps, shop and registration", slices.Collect(maps.Keys(roles)))
	}
}

// TestChartNetworkPolicy: by default a NetworkPolicy isolates every
// shard's pods for ingress, opening only the webhook and metrics ports (to
// any source, which every cluster's API server can then reach); the
// values' peers narrow each port, and each switch removes it.
func TestChartNetworkPolicy(t *testing.T) {
	policy := func(t *testing.T, values map[string]any) *networkingv1.NetworkPolicy {
		t.Helper()
		doc := renderChart(t, values)["helm-locker/templates/networkpolicy.yaml"]
		if strings.TrimSpace(doc) == "" {
			return nil
		}
		p := &networkingv1.NetworkPolicy{}
		if err := yaml.UnmarshalStrict([]byte(doc), p); err != nil {
			t.Fatalf("the chart's NetworkPolicy: %v\n%s", err, doc)
		}
		return p
	}
	type port struct {
		name string
		from []networkingv1.NetworkPolicyPeer
	}
	ports := func(p *networkingv1.NetworkPolicy) []port {
		var got []port
		for _, r := range p.Spec.Ingress {
			for _, pp := range r.Ports {
				got = append(got, port{pp.Port.String(), r.From})
			}
		}
		return got
	}
	controlPlane := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}}
	prometheus := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}}
	for _, tt := range []struct {
		name   string
		values map[string]any
		want   []port // nil: no NetworkPolicy
	}{
		{name: "default", want: []port{{name: "webhook"}, {name: "metrics"}}},
		{name: "peers", values: map[string]any{
			"webhook": map[string]any{"networkPolicy": map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}}}},
			"metrics": map[string]any{"networkPolicy": map[string]any{"from": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}}},
		}, want: []port{{"webhook", controlPlane}, {"metrics", prometheus}}},
		{name: "no webhook", values: map[string]any{"webhook": map[string]any{"enabled": false}}, want: []port{{name: "metrics"}}},
		{name: "no webhook, no metrics", values: map[string]any{"webhook": map[string]any{"enabled": false}, "metrics": map[string]any{"enabled": false}}},
		{name: "off", values: map[string]any{"networkPolicy": map[string]any{"enabled": false}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(t, tt.values)
			if tt.want == nil {
				if p != nil {
					t.Errorf("a NetworkPolicy: %+v", p.Spec)
				}
				return
			}
			if p == nil {
				t.Fatal("no NetworkPolicy")
			}
			if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policyTypes %v, want Ingress alone: the locker must reach the API server", p.Spec.PolicyTypes)
			}
			if diff := cmp.Diff(tt.want, ports(p), cmp.AllowUnexported(port{})); diff != "" {
				t.Errorf("ingress ports and peers (-want +got):\n%s", diff)
			}
		})
	}

	// Every shard's pods are selected, and each named port is one the
	// pods serve.
	out := renderChart(t, map[string]any{"shards": []any{"a", "b"}})
	p := &networkingv1.NetworkPolicy{}
	if err := yaml.UnmarshalStrict([]byte(out["helm-locker/templates/networkpolicy.yaml"]), p); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deployments(t, out) {
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("the NetworkPolicy does not select the pods of %s", d.Name)
		}
		var served []string
		for _, cp := range d.Spec.Template.Spec.Containers[0].Ports {
			served = append(served, cp.Name)
		}
		for _, pp := range ports(p) {
			if !slices.Contains(served, pp.name) {
				t.Errorf("the NetworkPolicy opens port %s, which %s's pods do not name (%v)", pp.name, d.Name, served)
			}
		}
	}
}

// grants reports whether rules let verb reach resource (a subresource as
// "pods/exec") of group, named name ("" for a list or watch of all), as
// Kubernetes' RBAC authorizer matches them: "*" matches any verb, group or
// resource, subresources included, and resourceNames, when set, only
// requests for those names.
func grants(rules []rbacv1.PolicyRule, verb, group, resource, name string) bool {
	for _, r := range rules {
		if !slices.Contains(r.Verbs, verb) && !slices.Contains(r.Verbs, "*") {
			continue
		}
		if !slices.Contains(r.APIGroups, group) && !slices.Contains(r.APIGroups, "*") {
			continue
		}
		_, sub, isSub := strings.Cut(resource, "/")
		if !slices.Contains(r.Resources, resource) && !slices.Contains(r.Resources, "*") && !(isSub && slices.Contains(r.Resources, "*/"+sub)) {
			continue
		}
		if len(r.ResourceNames) > 0 && (name == "" || !slices.Contains(r.ResourceNames, name)) {
			continue
		}
		return true
	}
	return false
}

// renderedKinds are the resources of every object the chart renders, which
// the self-lock holds.
func renderedKinds(t *testing.T, out map[string]string) []schema.GroupResource {
	t.Helper()
	var grs []schema.GroupResource
	for name, rendered := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range documents(rendered) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plural, _ := apimeta.UnsafeGuessKindToResource(meta.GroupVersionKind())
			grs = append(grs, plural.GroupResource())
		}
	}
	return grs
}

// fixtureChartKinds are the resources of the built-in kinds the e2e
// suite's charts hold: the locker must read them with the chart's RBAC.
// The kinds of CRDs (a group with a dot that Kubernetes does not own) are
// left out: rbac.extraReadRules is for them.
func fixtureChartKinds(t *testing.T) []schema.GroupResource {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "e2e", "testdata", "charts", "*", "templates", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no e2e charts (%v)", err)
	}
	apiVersion := regexp.MustCompile(`(?m)^apiVersion: *(\S+)\s*\nkind: *(\w+)`)
	var grs []schema.GroupResource
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range apiVersion.FindAllStringSubmatch(string(b), -1) {
			gv, err := schema.ParseGroupVersion(m[1])
			if err != nil || strings.Contains(m[1], "{{") || (strings.Contains(gv.Group, ".") && !strings.HasSuffix(gv.Group, ".k8s.io")) {
				continue
			}
			plural, _ := apimeta.UnsafeGuessKindToResource(gv.WithKind(m[2]))
			grs = append(grs, plural.GroupResource())
		}
	}
	return grs
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
	out, err := renderChartE(values)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderChartE is renderChart for values the chart may refuse.
func renderChartE(values map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "hl", Namespace: "registration", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

// deployment is the chart's first Deployment: the only one, unless it
// runs shards.
func deployment(t *testing.T, out map[string]string) *appsv1.Deployment {
	t.Helper()
	return deployments(t, out)[0]
}

// deployments are the chart's Deployments, one per shard.
func deployments(t *testing.T, out map[string]string) []*appsv1.Deployment {
	t.Helper()
	var ds []*appsv1.Deployment
	for _, doc := range documents(out["helm-locker/templates/deployment.yaml"]) {
		d := &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict([]byte(doc), d); err != nil {
			t.Fatalf("the chart's Deployment: %v", err)
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("the chart's Deployment %s has %d containers, want 1", d.Name, len(d.Spec.Template.Spec.Containers))
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		t.Fatal("the chart renders no Deployment")
	}
	return ds
}

// documents splits a rendered template into its YAML documents, leaving
// out those with nothing but comments.
func documents(rendered string) []string {
	var docs []string
	for _, doc := range strings.Split("\n"+rendered, "\n---") {
		for _, line := range strings.Split(doc, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				docs = append(docs, doc)
				break
			}
		}
	}
	return docs
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

// TestChartShards renders shards a and b: a Deployment, a
// PodDisruptionBudget and a webhook Service each, every one selecting its
// own shard's pods only; each shard serves the CRs labelled with its name
// under a Lease of its own and the one controller name; and the RBAC
// names every Lease, webhook configuration and certificate Secret the
// shards' args make the binary use.
func TestChartShards(t *testing.T) {
	out := renderChart(t, map[string]any{"shards": []any{"a", "b"}, "selfLock": map[string]any{"enabled": true}})
	unsharded := parseArgs(t, containerArgs(t, renderChart(t, nil)))
	ds := deployments(t, out)
	if len(ds) != 2 {
		t.Fatalf("%d Deployments, want one per shard", len(ds))
	}
	var pods []map[string]string
	var leases, configs, secrets []string
	for i, shard := range []string{"a", "b"} {
		d := ds[i]
		if want := "hl-helm-locker-" + shard; d.Name != want {
			t.Errorf("Deployment %d is %s, want %s", i, d.Name, want)
		}
		f := parseArgs(t, d.Spec.Template.Spec.Containers[0].Args)
		want := map[string]string{
			"watch-label-selector":    "sharding.helm-locker.io/shard=" + shard,
			"leader-elect-lease-name": "helm-locker-" + shard,
			"webhook-service":         "helm-locker-webhook-" + shard,
		}
		f.VisitAll(func(fl *pflag.Flag) {
			w, ok := want[fl.Name]
			if !ok {
				// Everything else, the controller name included, is
				// what one unsharded Deployment runs with.
				w = unsharded.Lookup(fl.Name).Value.String()
			}
			if got := fl.Value.String(); got != w {
				t.Errorf("shard %s: --%s = %q, want %q", shard, fl.Name, got, w)
			}
		})
		opts := &options{controllerName: f.Lookup("controller-name").Value.String(), leaseName: f.Lookup("leader-elect-lease-name").Value.String()}
		leases = append(leases, opts.lease())
		configs = append(configs, opts.lease()+".registration")
		secrets = append(secrets, opts.lease()+"-webhook")
		pods = append(pods, d.Spec.Template.Labels)
	}

	// Each selector of a shard's objects selects its pods, and only its.
	selects := func(what string, selector map[string]string, own int) {
		t.Helper()
		for i, labels := range pods {
			matches := true
			for k, v := range selector {
				matches = matches && labels[k] == v
			}
			if matches != (i == own) {
				t.Errorf("%s selects the pods of shard %d: %v, want %v", what, i, matches, i == own)
			}
		}
	}
	for i, d := range ds {
		selects("Deployment "+d.Name, d.Spec.Selector.MatchLabels, i)
	}
	var pdbs []policyv1.PodDisruptionBudget
	for _, doc := range documents(out["helm-locker/templates/poddisruptionbudget.yaml"]) {
		var pdb policyv1.PodDisruptionBudget
		if err := yaml.UnmarshalStrict([]byte(doc), &pdb); err != nil {
			t.Fatal(err)
		}
		pdbs = append(pdbs, pdb)
	}
	if len(pdbs) != 2 {
		t.Fatalf("%d PodDisruptionBudgets, want one per shard", len(pdbs))
	}
	for i, pdb := range pdbs {
		selects("PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector.MatchLabels, i)
	}
	webhooks := 0
	for _, doc := range documents(out["helm-locker/templates/service.yaml"]) {
		var svc corev1.Service
		if err := yaml.UnmarshalStrict([]byte(doc), &svc); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(svc.Name, "-metrics") {
			continue
		}
		if want := "helm-locker-webhook-" + []string{"a", "b"}[webhooks]; svc.Name != want {
			t.Errorf("webhook Service %d is %s, want %s, as --webhook-service says", webhooks, svc.Name, want)
		}
		selects("Service "+svc.Name, svc.Spec.Selector, webhooks)
		webhooks++
	}
	if webhooks != 2 {
		t.Errorf("%d webhook Services, want one per shard", webhooks)
	}

	// RBAC: the names the shards write, by name.
	names := func(rules []rbacv1.PolicyRule, resource string) []string {
		for _, r := range rules {
			if slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, "update") {
				return r.ResourceNames
			}
		}
		return nil
	}
	if got := names(clusterRole(t, out).Rules, "validatingwebhookconfigurations"); !slices.Equal(got, configs) {
		t.Errorf("the ClusterRole updates webhook configurations %v, want %v", got, configs)
	}
	// The chart creates each, since the locker may not.
	var created []string
	for _, doc := range documents(out["helm-locker/templates/webhookconfiguration.yaml"]) {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := yaml.UnmarshalStrict([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		if len(cfg.Webhooks) != 0 {
			t.Errorf("the chart's webhook configuration %s has webhooks %+v; the locker writes them, and a Helm upgrade must leave them", cfg.Name, cfg.Webhooks)
		}
		created = append(created, cfg.Name)
	}
	if !slices.Equal(created, configs) {
		t.Errorf("the chart creates webhook configurations %v, want %v, one per shard's Lease", created, configs)
	}
	var role rbacv1.Role
	for _, doc := range documents(out["helm-locker/templates/rbac.yaml"]) {
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err == nil && r.Kind == "Role" {
			role = r
		}
	}
	if got := names(role.Rules, "leases"); !slices.Equal(got, leases) {
		t.Errorf("the Role updates Leases %v, want %v", got, leases)
	}
	if got := names(role.Rules, "secrets"); !slices.Equal(got, secrets) {
		t.Errorf("the Role updates Secrets %v, want %v", got, secrets)
	}

	// The self-lock is a CR, so a shard must serve it.
	if self := out["helm-locker/templates/selflock.yaml"]; !strings.Contains(self, "sharding.helm-locker.io/shard: a\nspec:") {
		t.Errorf("the self-lock's HelmRelease is not labelled for shard a:\n%s", self)
	}
}

// TestChartImage: with no values the chart pulls the published image at
// its appVersion; a tag replaces the appVersion, and a digest wins over
// both, in every shard's Deployment too.
func TestChartImage(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"defaults", nil, "ghcr.io/helm-locker/helm-locker:" + ch.Metadata.AppVersion},
		{"tag", map[string]any{"image": map[string]any{"tag": "1.2.3"}}, "ghcr.io/helm-locker/helm-locker:1.2.3"},
		{"digest", map[string]any{"image": map[string]any{"repository": "registry.example/hl", "tag": "1.2.3", "digest": digest}}, "registry.example/hl@" + digest},
		{"shards", map[string]any{"shards": []any{"a", "b"}, "image": map[string]any{"digest": digest}}, "ghcr.io/helm-locker/helm-locker@" + digest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range deployments(t, renderChart(t, tc.values)) {
				if got := d.Spec.Template.Spec.Containers[0].Image; got != tc.want {
					t.Errorf("Deployment %s image = %q, want %q", d.Name, got, tc.want)
				}
			}
		})
	}
}

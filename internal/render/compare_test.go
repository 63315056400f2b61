package render

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/helm-locker/helm-locker/manifest"
)

// doc is one document of a manifest as Helm stores it.
func doc(source, body string) string { return "---\n# Source: " + source + "\n" + body + "\n" }

func configMap(name, data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: apps\n  annotations:\n    checksum/config: abc\ndata:\n" + data
}

func TestCompare(t *testing.T) {
	settings := doc("web/templates/cm.yaml", configMap("settings", "  mode: fast\n  list: [a, b]"))
	secret := func(password string) string {
		return doc("web/templates/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web\n  namespace: apps\ndata:\n  password: "+password)
	}
	role := doc("web/templates/role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: web\nrules: []")
	grown := doc("web/templates/cm.yaml", strings.Replace(configMap("settings", "  mode: fast\n  list: [a, b, c]\n  new: x"), "abc", "def", 1))
	redis := doc("web/charts/redis/templates/cm.yaml", configMap("redis", "  maxmemory: 1gb"))
	tests := []struct {
		name               string
		stored, now, again string
		want               []Change
	}{
		{"no change", settings + role, settings + role, settings + role, nil},
		{"a changed value",
			settings, strings.Replace(settings, "fast", "slow", 1), strings.Replace(settings, "fast", "slow", 1),
			[]Change{{Object: "ConfigMap apps/settings", Paths: []string{"/data/mode"}}}},
		{"a list grown, a key added, an annotation with a slash",
			settings, grown, grown,
			[]Change{{Object: "ConfigMap apps/settings", Paths: []string{"/data/list", "/data/new", "/metadata/annotations/checksum~1config"}}}},
		{"an element changed", settings, strings.Replace(settings, "[a, b]", "[a, c]", 1), strings.Replace(settings, "[a, b]", "[a, c]", 1),
			[]Change{{Object: "ConfigMap apps/settings", Paths: []string{"/data/list/1"}}}},
		{"a Secret's data",
			secret("czNjcmV0"), secret("bmV3"), secret("bmV3"),
			[]Change{{Object: "Secret apps/web", Paths: []string{"/data/password"}}}},
		{"generated values",
			secret("czNjcmV0"), secret("cmFuZG9tMQ=="), secret("cmFuZG9tMg=="), nil},
		{"added and removed",
			settings, role, role,
			[]Change{{Object: "ConfigMap apps/settings", Removed: true}, {Object: "ClusterRole web", Added: true}}},
		{"subcharts left out", settings + redis, settings, settings, nil},
		{"subcharts left out, now", settings, settings + redis, settings + redis, nil},
	}

	for _, h := range helms {
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				got, err := Compare(h, tt.stored, tt.now, tt.again)
				if err != nil {
					t.Fatal(err)
				}
				// The object's identity is checked apart, below.
				if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Change{}, "Group", "Kind", "Namespace", "Name")); diff != "" {
					t.Errorf("Compare (-want +got):\n%s", diff)
				}
				for _, value := range []string{"czNjcmV0", "bmV3", "s3cret"} {
					if strings.Contains(fmt.Sprintf("%#v", got), value) {
						t.Errorf("a change holds the value %q: %#v", value, got)
					}
				}
			})
		}
	}
}

// TestCompareReadsAsHelm: a "|+" block scalar that ends its document in
// a blank line reads with the blank line as Helm 4 stores it, and without
// it as Helm 3 does (see manifest.Helm), so the same two manifests differ
// for one Helm and not for the other. Each document is read with the
// line break that ends it, as the whole manifest reads.
func TestCompareReadsAsHelm(t *testing.T) {
	conf := func(blank string) string {
		return doc("web/templates/cm.yaml", configMap("core", "  app.conf: |+\n    runmode = prod\n"+blank)) +
			doc("web/templates/svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: core\n  namespace: apps")
	}
	kept, trimmed := conf("\n"), conf("")
	tests := []struct {
		helm manifest.Helm
		want []Change
	}{
		{manifest.Helm3, nil},
		{manifest.Helm4, []Change{{Object: "ConfigMap apps/core", Kind: "ConfigMap", Namespace: "apps", Name: "core", Paths: []string{"/data/app.conf"}}}},
	}
	for _, tt := range tests {
		got, err := Compare(tt.helm, kept, trimmed, trimmed)
		if err != nil || !cmp.Equal(tt.want, got) {
			t.Errorf("%s: Compare = %v, %v; want %v", tt.helm, got, err, tt.want)
		}
		for _, m := range []string{kept, trimmed} {
			whole, err := manifest.ParseRelease(m, tt.helm)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := objectsOf(m, tt.helm, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range whole {
				if diff := cmp.Diff(obj.Object, docs[keyOf(obj)]); diff != "" {
					t.Errorf("%s: %s read document by document (-whole manifest +document):\n%s", tt.helm, keyOf(obj), diff)
				}
			}
		}
	}
}

func TestCompareObjectLeftToChance(t *testing.T) {
	settings := doc("web/templates/cm.yaml", configMap("settings", "  mode: fast"))
	named := func(name string) string { return doc("web/templates/job.yaml", configMap(name, "  a: b")) }
	// A chart that names an object randomly renders it under another name
	// each time. The stored one is gone for good (an upgrade would delete
	// it); whether the new one is rendered is left to chance.
	got, err := Compare(manifest.Helm3, settings+named("job-abcde"), settings+named("job-fghij"), settings+named("job-klmno"))
	want := []Change{{Object: "ConfigMap apps/job-abcde", Kind: "ConfigMap", Namespace: "apps", Name: "job-abcde", Removed: true}}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("Compare = %v, %v; want %v", got, err, want)
	}
}

// TestCompareRenders compares renders of the dashboard chart, whose admin
// password is generated at install and kept by looking up its Secret, as
// grafana's is.
func TestCompareRenders(t *testing.T) {
	empty, _ := fakeCluster()
	stored := install(t, releaseOf(loadDashboard(t), nil, 1), empty)
	again := func(c Cluster) string {
		out, err := Render(context.Background(), fromHelm3(stored), c)
		if err != nil {
			t.Fatal(err)
		}
		return out.Manifest
	}

	t.Run("same inputs", func(t *testing.T) {
		// Before the install's objects exist, every render generates a
		// new password.
		now := again(empty)
		if now == stored.Manifest {
			t.Fatal("two renders are the same; the chart should generate its password")
		}
		got, err := Compare(manifest.Helm3, stored.Manifest, now, again(empty))
		if err != nil || len(got) != 0 {
			t.Errorf("Compare = %v, %v; want no change", got, err)
		}
	})
	t.Run("after install", func(t *testing.T) {
		// With the Secret in the cluster, the password is the stored one,
		// but the Deployment's checksum/secret differs for good: at
		// install, it was taken of a second generated password.
		installed, _ := fakeCluster(objectsIn(t, stored.Manifest)...)
		got, err := Compare(manifest.Helm3, stored.Manifest, again(installed), again(installed))
		want := []Change{{Object: "Deployment apps/web-dashboard", Group: "apps", Kind: "Deployment", Namespace: "apps", Name: "web-dashboard", Paths: []string{"/spec/template/metadata/annotations/checksum~1secret"}}}
		if err != nil || !cmp.Equal(want, got) {
			t.Errorf("Compare = %v, %v; want %v", got, err, want)
		}
	})
}

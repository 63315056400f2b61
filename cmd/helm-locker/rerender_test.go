package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/manifest"
)

func TestParseDiffTarget(t *testing.T) {
	tests := []struct {
		args, files []string
		rerender    bool
		want        diffTarget
		err         string
	}{
		{args: []string{"helmrelease/web"}, want: diffTarget{kind: targetHelmRelease, name: "web"}},
		{args: []string{"helmrelease.helm.cattle.io/web"}, want: diffTarget{kind: targetHelmRelease, name: "web"}},
		{args: []string{"manifestlocks/app"}, want: diffTarget{kind: targetManifestLock, name: "app"}},
		{files: []string{"a.yaml", "-"}, want: diffTarget{kind: targetFiles, files: []string{"a.yaml", "-"}}},
		{args: []string{"web"}, rerender: true, want: diffTarget{kind: targetRelease, name: "web", rerender: true}},
		{args: []string{"helmrelease/web"}, rerender: true, want: diffTarget{kind: targetHelmRelease, name: "web", rerender: true}},

		{err: "name either"},
		{args: []string{"web"}, files: []string{"a.yaml"}, err: "name either"},
		{args: []string{"web"}, err: "to render the Helm release web again, --rerender web"},
		{args: []string{"helmrelease/"}, err: "helmrelease/: want helmrelease/NAME or manifestlock/NAME"},
		{rerender: true, err: "--rerender needs a release"},
		{args: []string{"web"}, files: []string{"a.yaml"}, rerender: true, err: "it takes no -f"},
		{files: []string{"a.yaml"}, rerender: true, err: "it takes no -f"},
		{args: []string{"manifestlock/app"}, rerender: true, err: "a ManifestLock has no chart to render again"},
		{args: []string{"deployment/web"}, rerender: true, err: "deployment/web: want a Helm release name or helmrelease/NAME"},
		{args: []string{"helmrelease/"}, rerender: true, err: "helmrelease/: want a Helm release name or helmrelease/NAME"},
	}
	for _, tt := range tests {
		got, err := parseDiffTarget(tt.args, tt.files, tt.rerender)
		name := strings.Join(append(append([]string{}, tt.args...), tt.files...), " ")
		if tt.rerender {
			name += " --rerender"
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one with %q", name, err, tt.err)
		case tt.err == "":
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(diffTarget{})); diff != "" {
				t.Errorf("%s (-want +got):\n%s", name, diff)
			}
		}
	}
}

// chartManifest is a manifest as Helm stores it, of a chart whose
// ConfigMap copies a greeting it looks up and whose Secret holds a token
// from its values and a password from randAlphaNum.
func chartManifest(greeting, token, password string) string {
	return `---
# Source: app/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-app
  labels:
    app.kubernetes.io/name: app
data:
  greeting: "` + greeting + `"
  unchanged: "same"
---
# Source: app/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata:
  name: web-app
type: Opaque
data:
  password: ` + password + `
  token: ` + token + `
stringData:
  config.yaml: |
    token: ` + token + `
`
}

// TestRenderDiffsHidesSecrets: a Secret's values show only to a user the
// API server says may get it. Otherwise, on both sides, every value reads
// hiddenValue and only the changed paths, in the head line, tell what
// changed. Generated values never show as changes, and other kinds show
// whatever the user may read.
func TestRenderDiffsHidesSecrets(t *testing.T) {
	stored := chartManifest("hello", "b2xk", "c3RvcmVk")
	now := chartManifest("bonjour", "bmV3", "bm93")
	again := chartManifest("bonjour", "bmV3", "YWdhaW4=")
	changes, err := render.Compare(manifest.Helm3, stored, now, again)
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)

	configMap := `# ConfigMap apps/web-app: renders differently at /data/greeting
--- web-app (stored)
+++ web-app (rendered now)
@@ -1,6 +1,6 @@
 apiVersion: v1
 data:
-  greeting: hello
+  greeting: bonjour
   unchanged: same
 kind: ConfigMap
 metadata:
`
	tests := []struct {
		name    string
		allowed bool
		// reviewFails makes the access review itself fail.
		reviewFails bool
		want        string
	}{
		{name: "may get the Secret", allowed: true, want: configMap + `# Secret apps/web-app: renders differently at /data/token, /stringData/config.yaml
--- web-app (stored)
+++ web-app (rendered now)
@@ -1,11 +1,11 @@
 apiVersion: v1
 data:
   password: c3RvcmVk
-  token: b2xk
+  token: bmV3
 kind: Secret
 metadata:
   name: web-app
 stringData:
   config.yaml: |
-    token: b2xk
+    token: bmV3
 type: Opaque
`},
		{name: "may not get the Secret", want: configMap + `# Secret apps/web-app: renders differently at /data/token, /stringData/config.yaml
`},
		{name: "the review fails", reviewFails: true, want: configMap + `# Secret apps/web-app: renders differently at /data/token, /stringData/config.yaml
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := fake.NewClientset()
			var asked []authorizationv1.ResourceAttributes
			kube.PrependReactor("create", "selfsubjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
				review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				asked = append(asked, *review.Spec.ResourceAttributes)
				if tt.reviewFails {
					return true, nil, errTest
				}
				review = review.DeepCopy()
				review.Status.Allowed = tt.allowed
				return true, review, nil
			})
			diffs, err := renderDiffs(t.Context(), changes, manifest.Helm3, stored, now, "apps", mapper, kube.AuthorizationV1())
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			printDiffs(&b, diffs, false)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]authorizationv1.ResourceAttributes{{Namespace: "apps", Verb: "get", Resource: "secrets", Name: "web-app"}}, asked); diff != "" {
				t.Errorf("access reviews (-want +got):\n%s", diff)
			}
			for _, value := range []string{"c3RvcmVk", "bm93", "YWdhaW4="} {
				if !tt.allowed && strings.Contains(b.String(), value) {
					t.Errorf("a Secret's value %s shows to a user who may not get it", value)
				}
			}
		})
	}
}

// TestRenderDiffsHidesKeysChanged: a key a render adds to or removes from
// a Secret shows, with its value hidden; an added or removed Secret shows
// its keys only.
func TestRenderDiffsHidesKeysChanged(t *testing.T) {
	secret := func(data string) string {
		return "---\n# Source: app/templates/secret.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: other\n" + data
	}
	tests := []struct {
		name, stored, now string
		want              string
	}{
		{"key added", secret("data:\n  a: YQ==\n"), secret("data:\n  a: YQ==\n  b: Yg==\n"), `# Secret other/s: renders differently at /data/b
--- s (stored)
+++ s (rendered now)
@@ -1,6 +1,7 @@
 apiVersion: v1
 data:
   a: '` + hiddenValue + `'
+  b: '` + hiddenValue + `'
 kind: Secret
 metadata:
   name: s
`},
		{"Secret added", "", secret("stringData:\n  a: secret\n"), `# Secret other/s: rendered now, not in the stored manifest
--- s (stored)
+++ s (rendered now)
@@ -0,0 +1,7 @@
+apiVersion: v1
+kind: Secret
+metadata:
+  name: s
+  namespace: other
+stringData:
+  a: '` + hiddenValue + `'
`},
		{"Secret removed", secret("data:\n  a: YQ==\n"), "", `# Secret other/s: in the stored manifest, no longer rendered
--- s (stored)
+++ s (rendered now)
@@ -1,7 +0,0 @@
-apiVersion: v1
-data:
-  a: '` + hiddenValue + `'
-kind: Secret
-metadata:
-  name: s
-  namespace: other
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, err := render.Compare(manifest.Helm3, tt.stored, tt.now, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			kube := fake.NewClientset()
			kube.PrependReactor("create", "selfsubjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
				return true, action.(k8stesting.CreateAction).GetObject(), nil // not allowed
			})
			diffs, err := renderDiffs(t.Context(), changes, manifest.Helm3, tt.stored, tt.now, "apps", meta.NewDefaultRESTMapper(nil), kube.AuthorizationV1())
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			printDiffs(&b, diffs, false)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithPaths(t *testing.T) {
	from := map[string]any{"data": map[string]any{"a": "1", "a/b": "2", "gone": "3"}, "list": []any{"x", map[string]any{"k": "old"}}, "short": []any{"1"}}
	to := map[string]any{"data": map[string]any{"a": "one", "a/b": "two", "new": "4"}, "list": []any{"x", map[string]any{"k": "new"}}, "short": []any{"1", "2"}}
	got, err := withPaths(from, to, []string{"/data/a", "/data/a~1b", "/data/gone", "/data/new", "/list/1/k", "/short"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(to, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if from["data"].(map[string]any)["a"] != "1" {
		t.Error("withPaths changed from")
	}
	if _, err := withPaths(from, to, []string{"data"}); err == nil {
		t.Error("a path that is no JSON pointer was taken")
	}
}

var errTest = errors.New("the review failed")

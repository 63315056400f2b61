package overlay

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/helm-locker/helm-locker/internal/artifact"
)

// overlayFiles is a base (a Deployment, a ConfigMap and a Service) and an
// overlay that patches replicas, generates a ConfigMap and sets a
// namespace, the way such repositories are laid out.
func overlayFiles() artifact.Files {
	return artifact.Files{
		"base/kustomization.yaml": []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployment.yaml\n- service.yaml\n- config.yaml\n"),
		"base/deployment.yaml": []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
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
        image: nginx:1.27
        envFrom:
        - configMapRef: {name: web-env}
`),
		"base/service.yaml": []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - port: 80\n"),
		"base/config.yaml":  []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  greeting: hello\n"),
		"overlays/prod/kustomization.yaml": []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: prod
resources:
- ../../base
patches:
- path: replicas.yaml
configMapGenerator:
- name: web-env
  literals: [MODE=prod]
  files: [settings.env]
`),
		"overlays/prod/replicas.yaml": []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"),
		"overlays/prod/settings.env":  []byte("LEVEL=info\n"),
		"README.md":                   []byte("not a manifest"),
	}
}

func TestBuildOverlay(t *testing.T) {
	out, err := Build(overlayFiles(), "./overlays/prod", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	generated := regexp.MustCompile(`name: (web-env-[a-z0-9]{10})\n`).FindStringSubmatch(out)
	if generated == nil {
		t.Fatalf("no generated ConfigMap web-env-<hash> in:\n%s", out)
	}
	for _, want := range []string{
		"replicas: 3",
		"namespace: prod",
		"configMapRef:\n            name: " + generated[1], // the Deployment follows the hash
		"MODE: prod", "settings.env: |\n    LEVEL=info",
		"kind: Service", "name: web-config",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the build lacks %q:\n%s", want, out)
		}
	}
}

func TestBuildPlainFolder(t *testing.T) {
	files := artifact.Files{
		"apps/b/cm.yml":  []byte("kind: ConfigMap\nmetadata: {name: b}"),
		"apps/a.yaml":    []byte("kind: ConfigMap\nmetadata: {name: a}"),
		"apps/notes.txt": []byte("kind: Secret"),
		"other/c.yaml":   []byte("kind: ConfigMap\nmetadata: {name: c}"),
	}
	out, err := Build(files, "apps", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := "---\n# Source: apps/a.yaml\nkind: ConfigMap\nmetadata: {name: a}\n---\n# Source: apps/b/cm.yml\nkind: ConfigMap\nmetadata: {name: b}\n"
	if out != want {
		t.Errorf("Build(apps) =\n%s\nwant\n%s", out, want)
	}
}

// TestBuildRefuses: what the build must not do is refused with the reason
// and the path, before Kustomize runs, so nothing is fetched or executed.
func TestBuildRefuses(t *testing.T) {
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		_, _ = w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: remote}\n"))
	}))
	defer srv.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "plugin.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	kust := func(body string) artifact.Files {
		files := overlayFiles()
		files["overlays/prod/kustomization.yaml"] = []byte(body)
		return files
	}
	for _, tc := range []struct {
		name   string
		files  artifact.Files
		dir    string
		reason Reason
		says   string
	}{
		{"a remote file", kust("resources:\n- " + srv.URL + "/cm.yaml\n"), "overlays/prod", BuildFailed, "resources " + srv.URL + "/cm.yaml is remote"},
		{"a remote base on GitHub", kust("resources:\n- github.com/example/repo//deploy?ref=v1\n"), "overlays/prod", BuildFailed, "is remote"},
		{"a remote base over SSH", kust("resources:\n- git@example.com:org/repo.git\n"), "overlays/prod", BuildFailed, "is remote"},
		{"a go-getter base", kust("resources:\n- git::" + srv.URL + "/repo.git\n"), "overlays/prod", BuildFailed, "is remote"},
		{"a remote patch", kust("resources: [../../base]\npatches:\n- path: " + srv.URL + "/patch.yaml\n"), "overlays/prod", BuildFailed, "is remote"},
		{"a remote generator file", kust("configMapGenerator:\n- name: x\n  files: [k=" + srv.URL + "/f]\n"), "overlays/prod", BuildFailed, "configMapGenerator " + srv.URL + "/f is remote"},
		{"a base that climbs out", kust("resources:\n- ../../../elsewhere\n"), "overlays/prod", BuildFailed, "resources ../../../elsewhere leaves the artifact"},
		{"a base not in the artifact", kust("resources:\n- ../staging\n"), "overlays/prod", BuildFailed, "resources ../staging is not in the artifact"},
		{"an exec plugin", kust("resources: [../../base]\ntransformers:\n- |\n  apiVersion: example.com/v1\n  kind: Exec\n  metadata:\n    name: x\n    annotations:\n      config.kubernetes.io/function: |\n        exec:\n          path: " + script + "\n"), "overlays/prod", BuildFailed, "external plugins disabled"},
		{"a Helm chart", kust("helmCharts:\n- name: x\n  repo: " + srv.URL + "\n"), "overlays/prod", BuildFailed, "inflates Helm charts"},
		{"a path that is not there", overlayFiles(), "overlays/dev", PathNotFound, "overlays/dev is not a folder of the artifact"},
		{"a path that climbs out", overlayFiles(), "../x", PathNotFound, "../x leaves the artifact"},
		{"Kustomize's own error", kust("resources: [../../base]\npatches:\n- path: missing.yaml\n"), "overlays/prod", BuildFailed, "patches missing.yaml is not in the artifact"},
		{"too many objects", overlayFiles(), "overlays/prod", TooLarge, "made 4 objects, past the cap of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limits := Limits{}
			if tc.reason == TooLarge {
				limits.MaxObjects = 2
			}
			out, err := Build(tc.files, tc.dir, limits)
			var e *Error
			if !errors.As(err, &e) || e.Reason != tc.reason || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Build: %v\n%s\nwant a %s error saying %q", err, out, tc.reason, tc.says)
			}
		})
	}
	if n := fetched.Load(); n != 0 {
		t.Errorf("the builds sent %d requests to the remote references", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the exec plugin ran")
	}
}

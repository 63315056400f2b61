// Package hack holds the scripts and tools that build, test and release
// helm-locker; its tests hold the CI workflows to them.
package hack

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type workflow struct {
	// On is the workflow's triggers. YAML 1.1, which sigs.k8s.io/yaml
	// reads, takes the key on for true; GitHub takes it as a string.
	On   map[string]any `json:"true"`
	Jobs map[string]struct {
		Steps []struct {
			Name string `json:"name"`
			Uses string `json:"uses"`
			Run  string `json:"run"`
		} `json:"steps"`
	} `json:"jobs"`
}

var (
	makeCall   = regexp.MustCompile(`\bmake\s+((?:[^\s;&|)"]+\s*)+)`)
	scriptPath = regexp.MustCompile(`(?:^|[\s"(])((?:\./)?(?:hack|\.ci)/[A-Za-z0-9_./-]+)`)
	makeTarget = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// runs is every run: script of every step of a workflow.
func runs(t *testing.T, name string) (workflow, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", ".github", "workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var scripts []string
	for _, job := range w.Jobs {
		for _, s := range job.Steps {
			scripts = append(scripts, s.Run)
		}
	}
	return w, strings.Join(scripts, "\n")
}

// TestWorkflowsCallWhatExists: every make target and script the CI
// workflows name exists, so a workflow that cannot run here fails here
// when a target it calls is renamed; CI runs `make test` through .ci/run,
// and a release builds, pushes and signs the image and the chart.
func TestWorkflowsCallWhatExists(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets = append(targets, m[1])
	}
	called := map[string][]string{}
	for _, name := range []string{"ci.yaml", "release.yaml"} {
		_, script := runs(t, name)
		for _, call := range makeCall.FindAllStringSubmatch(script, -1) {
			for _, word := range strings.Fields(call[1]) {
				if strings.HasPrefix(word, "-") || strings.Contains(word, "=") {
					continue
				}
				called[name] = append(called[name], word)
				if !slices.Contains(targets, word) {
					t.Errorf("%s calls make %s; the Makefile has no such target", name, word)
				}
			}
		}
		for _, m := range scriptPath.FindAllStringSubmatch(script, -1) {
			called[name] = append(called[name], m[1])
			if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
				t.Errorf("%s runs %s: %v", name, m[1], err)
			}
		}
	}

	ci, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(called["ci.yaml"], ".ci/run") || !regexp.MustCompile(`(?m)^make test$`).Match(ci) {
		t.Errorf("ci.yaml runs %v, and .ci/run:\n%s\nwant ci.yaml to run .ci/run, and it make test", called["ci.yaml"], ci)
	}
	for _, want := range []string{"image", "chart", "dist", "hack/tools.sh"} {
		if !slices.Contains(called["release.yaml"], want) {
			t.Errorf("release.yaml calls %v, not %s", called["release.yaml"], want)
		}
	}
	release, script := runs(t, "release.yaml")
	if push, _ := release.On["push"].(map[string]any); push == nil || !slices.Contains(push["tags"].([]any), any("v*")) {
		t.Errorf("release.yaml runs on %v, want a push of a v* tag", release.On)
	}
	for _, want := range []string{`cosign sign --yes "$image"`, `cosign sign --yes "$chart"`, "bin/image/digest", "bin/chart/digest", "bin/image/sbom.spdx.json", "bin/dist/*"} {
		if !strings.Contains(script, want) {
			t.Errorf("release.yaml does not use %s", want)
		}
	}
}

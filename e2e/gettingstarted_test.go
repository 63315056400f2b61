package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// docBlock is one fenced code block of a docs page, with the marker
// comment above it: "not run: why", or "file: path" for a block the
// reader saves as a file.
type docBlock struct {
	lang, text string
	notRun     string
	file       string
}

var docMarker = regexp.MustCompile(`^<!-- (not run|file): (.*) -->$`)

// docBlocks reads the fenced code blocks of a markdown page, in order.
func docBlocks(t *testing.T, page string) []docBlock {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []docBlock
	var cur *docBlock
	var marker []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &docBlock{lang: strings.TrimPrefix(line, "```")}
			if marker != nil {
				if marker[1] == "not run" {
					cur.notRun = marker[2]
				} else {
					cur.file = marker[2]
				}
			}
			marker = nil
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case docMarker.MatchString(line):
			marker = docMarker.FindStringSubmatch(line)
		case strings.TrimSpace(line) != "":
			marker = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestGettingStarted runs docs/getting-started.md as a reader would: each
// sh block's commands as written, in a shell, with helm 4 and kubectl,
// the files it says to save saved, and checks what the page says
// happens. The page's namespaces, cattle-helm-system and apps, become
// fresh ones; the chart's Deployment runs as a process (pods never run
// here). A block is skipped only if the page marks it not run, with why.
func TestGettingStarted(t *testing.T) {
	t.Parallel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	registration, apps := freshName(t, "reg"), freshName(t, "apps")
	work := t.TempDir()
	bin := filepath.Join(work, ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"helm": env.Tools.Helm4, "kubectl": env.Tools.Kubectl} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	shellEnv := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+env.CP.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(work, ".helm", "cache"), "HELM_CONFIG_HOME="+filepath.Join(work, ".helm", "config"), "HELM_DATA_HOME="+filepath.Join(work, ".helm", "data"))
	namespaces := strings.NewReplacer("cattle-helm-system", registration)
	appsNS := regexp.MustCompile(`\bapps\b`)
	localize := func(s string) string {
		s = namespaces.Replace(s)
		s = appsNS.ReplaceAllString(s, apps)
		// The published chart is this checkout's, which the suite can
		// reach and which the image test pushes and installs as published.
		s = strings.ReplaceAll(s, "oci://ghcr.io/helm-locker/charts/helm-locker", "deploy/chart/helm-locker")
		return strings.ReplaceAll(s, "deploy/chart/helm-locker", filepath.Join(root, "deploy", "chart", "helm-locker"))
	}
	sh := func(script string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir, cmd.Env = work, shellEnv
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// what each block the page runs must be seen to do, by its first
	// command.
	checks := []struct {
		first string
		check func(out string, err error) error
	}{
		{"helm install helm-locker", func(string, error) error {
			runChartDeployment(t, registration, "getting-started", "helm-locker", "helm-locker")
			return nil
		}},
		{"kubectl auth can-i", func(out string, _ error) error {
			if strings.TrimSpace(out) != "yes" {
				return fmt.Errorf("the writer may not patch ConfigMaps: %q", out)
			}
			return nil
		}},
		{"kubectl apply -f helmrelease.yaml", func(out string, _ error) error {
			if !regexp.MustCompile(`(?m)^web\s+web\s+` + apps + `\s+1\s+Deployed`).MatchString(out) {
				return fmt.Errorf("kubectl get helmreleases does not show web Deployed at revision 1:\n%s", out)
			}
			return nil
		}},
		{"kubectl get helmrelease web", func(out string, _ error) error {
			for _, want := range []string{"Locked\tTrue\tLocked\tall 4 objects of revision 1", "Drifted\tFalse\tInLine", "Ready\tTrue"} {
				if !strings.Contains(out, want) {
					return fmt.Errorf("the conditions lack %q:\n%s", want, out)
				}
			}
			return nil
		}},
		{"kubectl -n " + apps + " get configmap web-config -w", func(out string, _ error) error {
			env.Eventually(t, 30*time.Second, func() error {
				if got, _ := keyValue(t, apps, "web-config", "greeting"); got != "hello" {
					return fmt.Errorf("web-config greeting = %q, want hello back", got)
				}
				return nil
			})
			return nil
		}},
		{"kubectl get events", func(out string, _ error) error {
			if !strings.Contains(out, "DriftCorrected") || !strings.Contains(out, "ConfigMap "+apps+"/web-config at /data/greeting, changed by kubectl-patch") {
				return fmt.Errorf("no DriftCorrected event naming the edit:\n%s", out)
			}
			return nil
		}},
		{"helm upgrade web", func(string, error) error {
			env.WaitForStateIn(t, registration, "web", v1alpha1.StateDeployed, 2)
			return nil
		}},
		{"kubectl -n " + registration + " patch helmrelease web", func(out string, err error) error {
			if err == nil || !strings.Contains(out, `denied the request: ConfigMap `+apps+`/web-config is locked by HelmRelease `+registration+`/web`) {
				return fmt.Errorf("the edit in Prevent mode was not denied (%v):\n%s", err, out)
			}
			return nil
		}},
	}
	ran := map[string]bool{}
	for i, b := range docBlocks(t, filepath.Join(root, "docs", "getting-started.md")) {
		switch {
		case b.file != "":
			path := filepath.Join(work, b.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(localize(b.text)), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		case b.lang != "sh":
			continue
		case b.notRun != "":
			t.Logf("block %d not run: %s", i, b.notRun)
			continue
		}
		// A command continued over lines is one command.
		script := strings.ReplaceAll(localize(b.text), "\\\n", " ")
		first := strings.TrimSpace(strings.SplitN(script, "\n", 2)[0])
		var check func(string, error) error
		for _, c := range checks {
			if strings.HasPrefix(first, c.first) {
				check, ran[c.first] = c.check, true
			}
		}
		run := func() (string, error) {
			if strings.Contains(script, " -w ") {
				// A watch in one terminal and an edit in another: the
				// watch runs in the background for a while.
				return sh("(timeout 10 " + strings.Replace(script, "\n", " &\n", 1) + "sleep 10; wait) 2>&1")
			}
			return sh(script)
		}
		out, err := run()
		if check == nil {
			if err != nil {
				t.Fatalf("block %d failed: %v\n%s\n%s", i, err, script, out)
			}
			continue
		}
		// What the page says happens may take a moment, as it does for
		// a reader.
		deadline := time.Now().Add(30 * time.Second)
		for {
			cerr := check(out, err)
			if cerr == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("block %d:\n%s\n%v", i, script, cerr)
			}
			time.Sleep(time.Second)
			out, err = run()
		}
	}
	for _, c := range checks {
		if !ran[c.first] {
			t.Errorf("no block of the page begins with %q: the page changed, and this test with it", c.first)
		}
	}
}

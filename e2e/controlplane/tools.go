package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// ToolsEnv names the environment variable that holds the folder of built
// tools. The Makefile sets it so that test binaries do not each run
// hack/tools.sh again.
const ToolsEnv = "HELM_LOCKER_TOOLS_BIN"

// Tools are the paths of the executables the control plane and tests run.
type Tools struct {
	Dir                   string
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kubectl               string
	Helm3                 string
	Helm4                 string
	// SourceController is Flux's source-controller, at the version
	// e2e/tools/flux pins (FluxVersion).
	SourceController string
}

// fluxRequire finds the source-controller version a go.mod requires.
var fluxRequire = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/fluxcd/source-controller (v\S+)\s*$`)

// FluxVersion is the version of Flux's source-controller that
// e2e/tools/flux/go.mod pins: the one hack/tools.sh builds, and whose
// CRDs the suite installs.
func FluxVersion() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(filepath.Join(root, "e2e", "tools", "flux", "go.mod"))
	if err != nil {
		return "", err
	}
	m := fluxRequire.FindSubmatch(gomod)
	if m == nil {
		return "", errors.New("e2e/tools/flux/go.mod requires no github.com/fluxcd/source-controller")
	}
	return string(m[1]), nil
}

// FindTools returns the built tools, building them first with hack/tools.sh
// unless $HELM_LOCKER_TOOLS_BIN already names their folder. The first build
// takes minutes; later ones find everything cached and return at once.
func FindTools(ctx context.Context) (Tools, error) {
	dir := os.Getenv(ToolsEnv)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return Tools{}, err
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "tools.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return Tools{}, fmt.Errorf("building tools with hack/tools.sh: %w\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		dir = lines[len(lines)-1]
	}
	t := Tools{
		Dir:                   dir,
		Etcd:                  filepath.Join(dir, "etcd"),
		KubeAPIServer:         filepath.Join(dir, "kube-apiserver"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kubectl:               filepath.Join(dir, "kubectl"),
		Helm3:                 filepath.Join(dir, "v3", "helm"),
		Helm4:                 filepath.Join(dir, "v4", "helm"),
	}
	flux, err := FluxVersion()
	if err != nil {
		return Tools{}, err
	}
	t.SourceController = filepath.Join(dir, "flux", "source-controller-"+flux)
	for _, p := range []string{t.Etcd, t.KubeAPIServer, t.KubeControllerManager, t.Kubectl, t.Helm3, t.Helm4, t.SourceController} {
		if _, err := os.Stat(p); err != nil {
			return Tools{}, fmt.Errorf("tool %s is missing (run hack/tools.sh): %w", p, err)
		}
	}
	return t, nil
}

// RepoRoot finds the helm-locker checkout by walking up from the working
// directory to the go.mod of the main module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/helm-locker/helm-locker\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the helm-locker repository: no go.mod for github.com/helm-locker/helm-locker above the working directory")
		}
		dir = parent
	}
}

// FluxCRDs is the folder of source-controller's own CRDs, from its module
// at FluxVersion, downloaded through the module proxy if not cached.
func FluxCRDs(ctx context.Context) (string, error) {
	version, err := FluxVersion()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/fluxcd/source-controller@"+version)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download of source-controller %s: %v %s\n%s", version, err, mod.Error, out)
	}
	return filepath.Join(mod.Dir, "config", "crd", "bases"), nil
}

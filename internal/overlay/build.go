package overlay

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/helm-locker/helm-locker/internal/artifact"
)

// Reason says why a folder could not be built.
type Reason string

// The reasons.
const (
	// PathNotFound: the folder is not in the artifact, or leaves it.
	PathNotFound Reason = "PathNotFound"
	// BuildFailed: Kustomize's own error, a remote base or file, or a
	// plugin the build does not run.
	BuildFailed Reason = "BuildFailed"
	// TooLarge: the build made more objects or bytes than Limits allow.
	TooLarge Reason = "TooLarge"
)

// Error is a folder that could not be built, and why.
type Error struct {
	Reason  Reason
	Message string
}

func (e *Error) Error() string { return e.Message }

func fail(reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Limits bound what a build may produce. Zero fields take the defaults.
type Limits struct {
	// MaxObjects caps a Kustomize build's objects (default 10,000).
	MaxObjects int
	// MaxBytes caps the manifest's bytes (default 64 MiB).
	MaxBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxObjects <= 0 {
		l.MaxObjects = 10000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 64 << 20
	}
	return l
}

// Build returns the manifest of the folder dir of files ("" or "./" for
// the root): the Kustomize build of its kustomization, or else its .yaml
// and .yml files, in its subfolders too, in path order.
func Build(files artifact.Files, dir string, limits Limits) (string, error) {
	limits = limits.withDefaults()
	root, err := folder(dir)
	if err != nil {
		return "", err
	}
	if !hasFolder(files, root) {
		return "", fail(PathNotFound, "%s is not a folder of the artifact", dir)
	}
	if kustomization(files, root) != "" {
		return kustomize(files, root, limits)
	}
	var out bytes.Buffer
	for _, p := range files.Paths() {
		if !within(p, root) || (path.Ext(p) != ".yaml" && path.Ext(p) != ".yml") {
			continue
		}
		if out.Len()+len(files[p]) > limits.MaxBytes {
			return "", fail(TooLarge, "the YAML files under %s are more than %d bytes", dir, limits.MaxBytes)
		}
		out.WriteString("---\n# Source: " + p + "\n")
		out.Write(files[p])
		out.WriteString("\n")
	}
	return out.String(), nil
}

// folder is dir as a clean path relative to the artifact's root, "" for
// the root; one that climbs out is not found.
func folder(dir string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(dir, "./"))
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fail(PathNotFound, "%s leaves the artifact", dir)
	}
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

func within(p, root string) bool { return root == "" || strings.HasPrefix(p, root+"/") }

func hasFolder(files artifact.Files, root string) bool {
	if root == "" {
		return true
	}
	for p := range files {
		if within(p, root) {
			return true
		}
	}
	return false
}

// kustomization is the path of root's kustomization file, if any.
func kustomization(files artifact.Files, root string) string {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if _, ok := files[path.Join(root, name)]; ok {
			return path.Join(root, name)
		}
	}
	return ""
}

// buildMu serialises Kustomize builds, which share maps that are not
// safe for concurrent use (kubernetes-sigs/kustomize#3659).
var buildMu sync.Mutex

func kustomize(files artifact.Files, root string, limits Limits) (yaml string, err error) {
	fs := filesys.MakeFsInMemory()
	for p, data := range files {
		if err := fs.MkdirAll("/" + path.Dir(p)); err != nil {
			return "", fail(BuildFailed, "%s: %v", p, err)
		}
		if err := fs.WriteFile("/"+p, data); err != nil {
			return "", fail(BuildFailed, "%s: %v", p, err)
		}
	}
	if err := checkLocal(files, root, map[string]bool{}); err != nil {
		return "", err
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	// Kustomize panics on some invalid input; a tenant's files must not
	// take the locker down.
	defer func() {
		if r := recover(); r != nil {
			err = fail(BuildFailed, "kustomize build %s: %v", root, r)
		}
	}()
	k := krusty.MakeKustomizer(&krusty.Options{
		LoadRestrictions: types.LoadRestrictionsRootOnly,
		PluginConfig:     types.DisabledPluginConfig(),
	})
	res, err := k.Run(fs, "/"+root)
	if err != nil {
		return "", fail(BuildFailed, "kustomize build %s: %v", displayPath(root), err)
	}
	if res.Size() > limits.MaxObjects {
		return "", fail(TooLarge, "kustomize build %s made %d objects, past the cap of %d", displayPath(root), res.Size(), limits.MaxObjects)
	}
	out, err := res.AsYaml()
	if err != nil {
		return "", fail(BuildFailed, "kustomize build %s: %v", displayPath(root), err)
	}
	if len(out) > limits.MaxBytes {
		return "", fail(TooLarge, "kustomize build %s made %d bytes, past the cap of %d", displayPath(root), len(out), limits.MaxBytes)
	}
	return string(out), nil
}

func displayPath(root string) string { return "./" + root }

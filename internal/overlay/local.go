package overlay

import (
	"path"
	"regexp"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/helm-locker/helm-locker/internal/artifact"
)

// checkLocal holds the kustomization of root, and of every folder it
// names, to the artifact: each path it names must be a file or folder of
// it. Kustomize fetches a URL it is given (a remote file over HTTP, a
// remote base with `git clone`) before it looks at the file system, so
// this runs first, and a remote reference refuses the build before any
// attempt to reach it. visited stops a cycle.
func checkLocal(files artifact.Files, root string, visited map[string]bool) error {
	if visited[root] {
		return nil
	}
	visited[root] = true
	file := kustomization(files, root)
	if file == "" {
		return fail(BuildFailed, "%s is named as a base or component, and holds no kustomization", displayPath(root))
	}
	var k types.Kustomization
	if err := yaml.Unmarshal(files[file], &k); err != nil {
		return fail(BuildFailed, "%s: %v", file, err)
	}
	if len(k.HelmCharts) > 0 || len(k.HelmChartInflationGenerator) > 0 || k.HelmGlobals != nil {
		return fail(BuildFailed, "%s inflates Helm charts, which runs the helm binary: not built here", file)
	}
	for _, ref := range references(&k) {
		if isRemote(ref.path) {
			return fail(BuildFailed, "%s: %s %s is remote: a lock builds only from its artifact, and fetches nothing else", file, ref.field, ref.path)
		}
		target := path.Clean(path.Join(root, ref.path))
		if target == ".." || strings.HasPrefix(target, "../") || path.IsAbs(ref.path) {
			return fail(BuildFailed, "%s: %s %s leaves the artifact", file, ref.field, ref.path)
		}
		if target == "." {
			target = ""
		}
		if _, isFile := files[target]; isFile {
			continue
		}
		if !ref.folderAllowed || !hasFolder(files, target) {
			return fail(BuildFailed, "%s: %s %s is not in the artifact", file, ref.field, ref.path)
		}
		if err := checkLocal(files, target, visited); err != nil {
			return err
		}
	}
	return nil
}

type reference struct {
	field, path   string
	folderAllowed bool
}

// references are the paths a kustomization names: resources, components
// and bases (files or folders), and every file a patch, generator,
// transformer or setting is read from. An entry that holds a newline is
// an inline patch or plugin configuration, not a path.
func references(k *types.Kustomization) []reference {
	var out []reference
	add := func(field string, folder bool, paths ...string) {
		for _, p := range paths {
			if p != "" && !strings.Contains(p, "\n") {
				out = append(out, reference{field: field, path: p, folderAllowed: folder})
			}
		}
	}
	add("resources", true, k.Resources...)
	add("components", true, k.Components...)
	add("bases", true, k.Bases...)
	add("crds", false, k.Crds...)
	add("configurations", false, k.Configurations...)
	add("generators", true, k.Generators...)
	add("transformers", true, k.Transformers...)
	add("validators", true, k.Validators...)
	add("openapi", false, k.OpenAPI["path"])
	for _, p := range k.PatchesStrategicMerge {
		add("patchesStrategicMerge", false, string(p))
	}
	for _, p := range append(append([]types.Patch{}, k.Patches...), k.PatchesJson6902...) {
		add("patches", false, p.Path)
	}
	for _, r := range k.Replacements {
		add("replacements", false, r.Path)
	}
	generated := func(field string, args types.GeneratorArgs) {
		for _, f := range args.FileSources {
			// files: [key=path] or [path]
			if _, p, ok := strings.Cut(f, "="); ok {
				f = p
			}
			add(field, false, f)
		}
		add(field, false, args.EnvSources...)
		add(field, false, args.EnvSource)
	}
	for _, g := range k.ConfigMapGenerator {
		generated("configMapGenerator", g.GeneratorArgs)
	}
	for _, g := range k.SecretGenerator {
		generated("secretGenerator", g.GeneratorArgs)
	}
	return out
}

// scpUser is the user@ of an SCP-like Git address (git@host:org/repo).
var scpUser = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// isRemote says whether Kustomize would fetch p rather than read it: what
// its loader takes for a URL (any scheme) or a Git repository (a
// go-getter git:: prefix, an SCP-like user@host:, or github.com/...).
func isRemote(p string) bool {
	lower := strings.ToLower(p)
	lower = strings.TrimPrefix(lower, "git::")
	return strings.Contains(lower, "://") || scpUser.MatchString(lower) ||
		strings.HasPrefix(lower, "github.com/") || strings.HasPrefix(lower, "github.com:")
}

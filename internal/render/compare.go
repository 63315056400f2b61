package render

import (
	"cmp"
	"iter"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/manifest"
)

// Change is how one object a chart renders now differs from the one Helm
// stored. It never holds a value, only where values differ: a Secret's
// data must not leak into events, conditions or logs.
type Change struct {
	// Object is "Kind namespace/name", or "Kind name" without a
	// namespace.
	Object string
	// Group, Kind, Namespace and Name are the object's, the namespace as
	// the manifest writes it ("" for the release's, or for a
	// cluster-scoped object): only the caller's RESTMapper tells which.
	Group, Kind, Namespace, Name string
	// Paths are the RFC 6901 JSON pointers where the two differ: the
	// leaves, a key on one side only, a list whose length changed.
	Paths []string
	// Added says the chart now renders an object the stored manifest
	// lacks.
	Added bool
	// Removed says the stored manifest has an object the chart no longer
	// renders.
	Removed bool
}

// Compare says how the manifest a chart renders now differs from the one
// Helm stored. All three are read as Helm h stores a manifest
// (manifest.ParseRelease): the revision's Helm, which rendered now and
// again too (see Release). Charts generate values (randAlphaNum, genCA,
// uuidv4, now) that differ at every render, so again, a second render with
// the same inputs as now, marks what the chart does not decide: every path
// (or whole object) where now and again differ is left out. Objects whose
// "# Source:" is under a subchart (<chart>/charts/...) are left out of
// both sides, since Helm does not store subcharts and Render cannot
// render them. Changes are in a fixed order: by group, kind, namespace
// and name, with paths sorted.
func Compare(h manifest.Helm, stored, now, again string) ([]Change, error) {
	return compare(h, stored, now, again, false)
}

// Compare is Compare of what r stored with now and again, r's render and
// its render again. A revision rendered from its chart's source (see
// WithChart) renders its subcharts' objects too, and they are compared.
func (r *Release) Compare(now, again string) ([]Change, error) {
	return compare(r.Helm, r.Manifest, now, again, r.fromSource())
}

func compare(h manifest.Helm, stored, now, again string, subcharts bool) ([]Change, error) {
	s, err := objectsOf(stored, h, subcharts)
	if err != nil {
		return nil, err
	}
	n, err := objectsOf(now, h, subcharts)
	if err != nil {
		return nil, err
	}
	a, err := objectsOf(again, h, subcharts)
	if err != nil {
		return nil, err
	}
	keys := make([]objectKey, 0, len(s)+len(n))
	for k := range s {
		keys = append(keys, k)
	}
	for k := range n {
		if _, ok := s[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, objectKey.compare)

	var changes []Change
	for _, k := range keys {
		was, stored := s[k]
		is, renders := n[k]
		then, rendersAgain := a[k]
		switch {
		case renders != rendersAgain:
			// Whether the chart renders it at all is left to chance.
		case !renders:
			changes = append(changes, k.change(nil, false, true))
		case !stored:
			changes = append(changes, k.change(nil, true, false))
		default:
			if paths := stablePaths(diff(was, is), diff(is, then)); len(paths) > 0 {
				changes = append(changes, k.change(paths, false, false))
			}
		}
	}
	return changes, nil
}

// objectKey identifies an object across renders: the version may change
// with the chart, the group, kind, namespace (as written) and name may not.
type objectKey struct{ group, kind, namespace, name string }

func (k objectKey) compare(o objectKey) int {
	return cmp.Or(cmp.Compare(k.group, o.group), cmp.Compare(k.kind, o.kind),
		cmp.Compare(k.namespace, o.namespace), cmp.Compare(k.name, o.name))
}

func (k objectKey) change(paths []string, added, removed bool) Change {
	return Change{Object: k.String(), Group: k.group, Kind: k.kind, Namespace: k.namespace, Name: k.name, Paths: paths, Added: added, Removed: removed}
}

func (k objectKey) String() string {
	if k.namespace == "" {
		return k.kind + " " + k.name
	}
	return k.kind + " " + k.namespace + "/" + k.name
}

// sourceLine starts every document of a manifest as Helm stores it.
const sourceLine = "---\n# Source: "

// objectsOf parses a manifest as Helm h stored it into its objects,
// leaving out those rendered from subcharts unless subcharts is set. manifest.ParseRelease does
// not say which template an object came from, so the manifest is cut at
// Helm's Source lines first and each document parsed on its own, with the
// line break that ends it: Helm 4 applies a "|+" block scalar that ends a
// document with every line break up to the next "---". Where two
// documents declare the same object, the last is kept, as Helm's apply of
// both would leave it.
func objectsOf(m string, h manifest.Helm, subcharts bool) (map[objectKey]map[string]any, error) {
	out := map[objectKey]map[string]any{}
	for doc := range documents(m) {
		source, _, _ := strings.Cut(strings.TrimPrefix(doc, sourceLine), "\n")
		if !strings.HasPrefix(doc, sourceLine) {
			source = "" // what comes before the first Source line
		}
		if _, under, _ := strings.Cut(source, "/"); !subcharts && strings.HasPrefix(under, "charts/") {
			continue
		}
		objs, err := manifest.ParseRelease(doc, h)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			out[keyOf(obj)] = obj.Object
		}
	}
	return out, nil
}

// documents cuts a manifest as Helm stores it before each Source line:
// each document keeps the line break before the next one's "---".
func documents(m string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for m != "" {
			next := len(m)
			if i := strings.Index(m[1:], "\n"+sourceLine); i >= 0 {
				next = i + 2 // past the line break
			}
			if !yield(m[:next]) {
				return
			}
			m = m[next:]
		}
	}
}

func keyOf(obj *unstructured.Unstructured) objectKey {
	gvk := obj.GroupVersionKind()
	return objectKey{group: gvk.Group, kind: gvk.Kind, namespace: obj.GetNamespace(), name: obj.GetName()}
}

// diff returns the JSON pointers where a and b differ: leaves, keys on one
// side only, lists of different lengths, values of different types.
func diff(a, b any) []string {
	var paths []string
	var walk func(a, b any, path string)
	walk = func(a, b any, path string) {
		switch av := a.(type) {
		case map[string]any:
			bv, ok := b.(map[string]any)
			if !ok {
				paths = append(paths, path)
				return
			}
			for k, ae := range av {
				if be, ok := bv[k]; ok {
					walk(ae, be, path+"/"+escape(k))
				} else {
					paths = append(paths, path+"/"+escape(k))
				}
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					paths = append(paths, path+"/"+escape(k))
				}
			}
		case []any:
			bv, ok := b.([]any)
			if !ok || len(av) != len(bv) {
				paths = append(paths, path)
				return
			}
			for i := range av {
				walk(av[i], bv[i], path+"/"+strconv.Itoa(i))
			}
		default:
			// a is a scalar here, so == cannot panic.
			if a != b {
				paths = append(paths, path)
			}
		}
	}
	walk(a, b, "")
	return paths
}

// escape escapes a key for a JSON pointer (RFC 6901).
func escape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// stablePaths is changed without the paths at, under or above one that
// differs between two renders with the same inputs, sorted.
func stablePaths(changed, unstable []string) []string {
	var out []string
	for _, p := range changed {
		if !slices.ContainsFunc(unstable, func(u string) bool {
			return p == u || strings.HasPrefix(p, u+"/") || strings.HasPrefix(u, p+"/")
		}) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Package declare decides what a lock, a HelmRelease's or a
// ManifestLock's, declares of its manifest: which objects it holds, and
// which of their fields it leaves alone. The controller and the CLI's diff
// share it, so both see the same.
package declare

import (
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
)

// ignoreRule is a compiled spec.ignore entry.
type ignoreRule struct {
	paths                []engine.Pointer
	group, version, kind string
	name, namespace      *regexp.Regexp
}

// Ignore checks and compiles spec.ignore into engine.ObjectSet.Ignore (nil
// for no rules). Its errors name the rule and field, as a user reads them
// in the CR's status.
func Ignore(rules []v1alpha1.IgnoreRule) (func(*unstructured.Unstructured) []engine.Pointer, error) {
	compiled, err := compileIgnore(rules)
	if err != nil {
		return nil, err
	}
	return pointersFor(compiled), nil
}

func compileIgnore(rules []v1alpha1.IgnoreRule) ([]ignoreRule, error) {
	out := make([]ignoreRule, 0, len(rules))
	for i, r := range rules {
		var c ignoreRule
		if len(r.Paths) == 0 {
			return nil, fmt.Errorf("spec.ignore[%d].paths: at least one JSON pointer is required", i)
		}
		for j, text := range r.Paths {
			p, err := engine.ParsePointer(text)
			if err != nil {
				return nil, fmt.Errorf("spec.ignore[%d].paths[%d]: %w", i, j, err)
			}
			c.paths = append(c.paths, p)
		}
		if t := r.Target; t != nil {
			c.group, c.version, c.kind = t.Group, t.Version, t.Kind
			var err error
			if c.name, err = anchored(t.Name); err != nil {
				return nil, fmt.Errorf("spec.ignore[%d].target.name: %w", i, err)
			}
			if c.namespace, err = anchored(t.Namespace); err != nil {
				return nil, fmt.Errorf("spec.ignore[%d].target.namespace: %w", i, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// anchored compiles a target pattern so that it matches whole values: "web"
// selects the object web, not web-canary.
func anchored(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", pattern, err)
	}
	return re, nil
}

// pointersFor returns the ignored fields of one declared object.
func pointersFor(rules []ignoreRule) func(*unstructured.Unstructured) []engine.Pointer {
	if len(rules) == 0 {
		return nil
	}
	return func(obj *unstructured.Unstructured) []engine.Pointer {
		gvk := obj.GroupVersionKind()
		var out []engine.Pointer
		for _, r := range rules {
			if (r.group == "" || r.group == gvk.Group) &&
				(r.version == "" || r.version == gvk.Version) &&
				(r.kind == "" || r.kind == gvk.Kind) &&
				(r.name == nil || r.name.MatchString(obj.GetName())) &&
				(r.namespace == nil || r.namespace.MatchString(obj.GetNamespace())) {
				out = append(out, r.paths...)
			}
		}
		return out
	}
}

// SplitOptedOut leaves out the objects the lock may not or cannot hold,
// and says why for the status: those whose manifest sets
// v1alpha1.UnlockAnnotation to "false", and those with no fixed name.
func SplitOptedOut(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []v1alpha1.ObjectProblem) {
	kept := objs[:0:0]
	var out []v1alpha1.ObjectProblem
	for _, o := range objs {
		if o.GetName() == "" {
			// Helm creates a new object at each upgrade, named by
			// the API server, and never looks for the old one.
			out = append(out, v1alpha1.ObjectProblem{Object: o.GetKind() + " " + o.GetGenerateName() + "*", Reason: v1alpha1.ReasonGenerateName,
				Message: "it is named by metadata.generateName, so each apply creates a new object; there is no one object to hold"})
			continue
		}
		if o.GetAnnotations()[v1alpha1.UnlockAnnotation] == "false" {
			name := o.GetName()
			if ns := o.GetNamespace(); ns != "" {
				name = ns + "/" + name
			}
			out = append(out, v1alpha1.ObjectProblem{Object: o.GetKind() + " " + name, Reason: v1alpha1.ReasonOptedOut,
				Message: "the chart sets " + v1alpha1.UnlockAnnotation + `: "false" on it`})
			continue
		}
		kept = append(kept, o)
	}
	return kept, out
}

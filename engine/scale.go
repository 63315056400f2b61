package engine

import (
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// replicasPath is where the built-in kinds with a scale subresource
// (Deployment, StatefulSet, ReplicaSet, ReplicationController) keep their
// replicas.
var replicasPath = Pointer{"spec", "replicas"}

// scalePaths are the replicas paths of the custom resources' scale
// subresources, read from each CRD's
// spec.versions[].subresources.scale.specReplicasPath as the CRD watch sees
// it (see informers.Options.OnCRD). A scale request carries an autoscaling
// Scale, and the API server maps its spec.replicas to that path; a CRD may
// name any path under .spec (.spec.size, .spec.workers.count).
type scalePaths struct {
	mu sync.Mutex
	// byCRD holds, by CRD name (plural.group), the path of each served
	// version that has a scale subresource; a version without one has
	// no entry.
	byCRD map[string]map[string]Pointer
}

// seen records what crd says of its versions' scale subresources.
func (s *scalePaths) seen(crd *unstructured.Unstructured) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	paths := map[string]Pointer{}
	for _, v := range versions {
		v, _ := v.(map[string]any)
		name, _, _ := unstructured.NestedString(v, "name")
		text, found, _ := unstructured.NestedString(v, "subresources", "scale", "specReplicasPath")
		if !found {
			continue
		}
		// A path the API server would not take (it allows .spec.a.b,
		// no array notation) is held as unknown: nil.
		paths[name] = parseScalePath(text)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCRD == nil {
		s.byCRD = map[string]map[string]Pointer{}
	}
	s.byCRD[crd.GetName()] = paths
}

// path returns where gvr's scale subresource reads and writes replicas,
// and false when it is not known: a CRD whose version has no scale
// subresource, or names a path that cannot be read. A type no CRD serves
// is a built-in one (replicasPath), as is one whose CRD the watch has not
// listed yet: no other path was ever judged before CRDs were read.
func (s *scalePaths) path(gvr schema.GroupVersionResource) (Pointer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	versions, ok := s.byCRD[gvr.Resource+"."+gvr.Group]
	if !ok || gvr.Group == "" {
		return replicasPath, true
	}
	p := versions[gvr.Version]
	return p, p != nil
}

// parseScalePath turns a CRD's specReplicasPath (".spec.replicas") into a
// Pointer; nil if it is not a plain path under .spec.
func parseScalePath(text string) Pointer {
	rest, ok := strings.CutPrefix(text, ".")
	if !ok || strings.ContainsAny(rest, "[]") {
		return nil
	}
	p := Pointer(strings.Split(rest, "."))
	if len(p) < 2 || p[0] != "spec" || slices.Contains(p, "") {
		return nil
	}
	return p
}

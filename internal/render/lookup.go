package render

import (
	"context"
	"strings"

	enginev3 "helm.sh/helm/v3/pkg/engine"
	enginev4 "helm.sh/helm/v4/pkg/engine"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Lookup is one read a chart's `lookup` made. A render's output depends
// on what its lookups found, so the caller has to watch these objects, as
// well as the release, to know when a render would change.
type Lookup struct {
	// GVR is the resource read; its Resource is empty when the kind is
	// not served.
	GVR schema.GroupVersionResource
	// Kind is the kind the template asked for.
	Kind string
	// Namespace is empty for cluster-scoped kinds, and for a read
	// across all namespaces.
	Namespace string
	// Name is empty for a list.
	Name string
}

// String names the lookup to a person: "ConfigMap apps/settings",
// "ConfigMaps in apps", "ClusterRole admin".
func (l Lookup) String() string {
	switch {
	case l.Name != "" && l.Namespace != "":
		return l.Kind + " " + l.Namespace + "/" + l.Name
	case l.Name != "":
		return l.Kind + " " + l.Name
	case l.Namespace != "":
		return plural(l.Kind) + " in " + l.Namespace
	default:
		return plural(l.Kind)
	}
}

// plural is good enough English for kinds: Ingresses, NetworkPolicies.
func plural(kind string) string {
	switch {
	case strings.HasSuffix(kind, "s"), strings.HasSuffix(kind, "x"), strings.HasSuffix(kind, "ch"), strings.HasSuffix(kind, "sh"):
		return kind + "es"
	case strings.HasSuffix(kind, "y") && len(kind) > 1 && !strings.ContainsRune("aeiou", rune(kind[len(kind)-2])):
		return kind[:len(kind)-1] + "ies"
	}
	return kind + "s"
}

// LookupError says a chart's lookup could not be made with the caller's
// client: it is forbidden to it, or the kind is not served. Helm fails the
// render then, so nothing can be said about what the chart now renders
// until the permission or the type is there; a NotFound is no error, as
// Helm's lookup returns an empty map for it.
type LookupError struct {
	Lookup Lookup
	Err    error
}

func (e *LookupError) Error() string { return "lookup of " + e.Lookup.String() + ": " + e.Err.Error() }

func (e *LookupError) Unwrap() error { return e.Err }

// recorder is the engine.ClientProvider a render's lookups go through. It
// reads with the caller's client, records each read, and after a read
// fails, fails every later one without reading: Helm stops the render at
// the first error anyway, and a caller told "forbidden" should not see
// more requests made in its name.
type recorder struct {
	ctx     context.Context
	cluster Cluster
	seen    map[Lookup]bool
	lookups []Lookup
	failed  *LookupError
}

// Both Helms' engines take the recorder for their lookups.
var (
	_ enginev3.ClientProvider = (*recorder)(nil)
	_ enginev4.ClientProvider = (*recorder)(nil)
)

func newRecorder(ctx context.Context, c Cluster) *recorder {
	return &recorder{ctx: ctx, cluster: c, seen: map[Lookup]bool{}}
}

// GetClientFor maps the kind as Helm's own provider does through
// discovery, here through the caller's RESTMapper. A kind the mapper does
// not know still gets a client, one whose reads fail: Helm calls it with
// the namespace and name, so the LookupError can name the whole lookup.
func (r *recorder) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return &lookupClient{recorder: r, kind: kind, unmapped: err}, true, nil
	}
	mapping, err := r.cluster.Mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
	if err != nil {
		return &lookupClient{recorder: r, gvr: gv.WithResource(""), kind: kind, unmapped: err}, true, nil
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	return &lookupClient{recorder: r, gvr: mapping.Resource, kind: kind}, namespaced, nil
}

// begin records l, and says whether it may be read.
func (r *recorder) begin(l Lookup, unmapped error) error {
	if r.failed != nil {
		return r.failed
	}
	if !r.seen[l] {
		r.seen[l] = true
		r.lookups = append(r.lookups, l)
	}
	if unmapped != nil {
		r.failed = &LookupError{Lookup: l, Err: unmapped}
		return r.failed
	}
	return nil
}

// end passes NotFound on for Helm to turn into an empty map, and makes
// every other error a LookupError.
func (r *recorder) end(l Lookup, err error) error {
	if err == nil || apierrors.IsNotFound(err) {
		return err
	}
	r.failed = &LookupError{Lookup: l, Err: err}
	return r.failed
}

// lookupClient is the client Helm's lookup function reads with. It
// implements only the reads Helm's lookup makes; the embedded interface is
// nil, so a render can never write to the cluster.
type lookupClient struct {
	dynamic.NamespaceableResourceInterface
	recorder  *recorder
	gvr       schema.GroupVersionResource
	kind      string
	namespace string
	unmapped  error
}

var _ dynamic.NamespaceableResourceInterface = (*lookupClient)(nil)

func (c *lookupClient) Namespace(ns string) dynamic.ResourceInterface {
	in := *c
	in.namespace = ns
	return &in
}

// Get reads with the render's context: Helm's lookup passes
// context.Background(), which no caller could cancel.
func (c *lookupClient) Get(_ context.Context, name string, opts metav1.GetOptions, subresources ...string) (*unstructured.Unstructured, error) {
	l := c.lookup(name)
	if err := c.recorder.begin(l, c.unmapped); err != nil {
		return nil, err
	}
	obj, err := c.resource().Get(c.recorder.ctx, name, opts, subresources...)
	return obj, c.recorder.end(l, err)
}

// List is Get for a lookup without a name.
func (c *lookupClient) List(_ context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l := c.lookup("")
	if err := c.recorder.begin(l, c.unmapped); err != nil {
		return nil, err
	}
	list, err := c.resource().List(c.recorder.ctx, opts)
	return list, c.recorder.end(l, err)
}

func (c *lookupClient) lookup(name string) Lookup {
	return Lookup{GVR: c.gvr, Kind: c.kind, Namespace: c.namespace, Name: name}
}

func (c *lookupClient) resource() dynamic.ResourceInterface {
	res := c.recorder.cluster.Client.Resource(c.gvr)
	if c.namespace != "" {
		return res.Namespace(c.namespace)
	}
	return res
}

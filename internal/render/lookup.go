package render

import (
	"context"
	"fmt"
	"strconv"
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

// A list lookup is read in pages and cut off: a chart that lists a
// namespace of thousands of Secrets would otherwise have every one of them
// read at once, held by the locker, and handed to its template.
const (
	// ListLookupBytes is the most a list lookup reads: its items, about
	// as many bytes as their JSON.
	ListLookupBytes = 8 << 20
	// listPageItems is the most items a page of a list lookup asks for.
	listPageItems = 500
	// listFirstPageItems is the first page's: an object may be 1.5 MiB
	// (etcd's limit), so the first page is small, and each later one as
	// large as the bytes left allow at the items' size so far.
	listFirstPageItems = 20
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

// ListCutOffError says a list lookup found more than a render may read
// (ListLookupBytes): it is cut off, and the render fails, since a chart
// handed part of a list would render something Helm never would.
type ListCutOffError struct {
	// Items and Bytes are what was read when it was cut off.
	Items, Bytes int
}

func (e *ListCutOffError) Error() string {
	return fmt.Sprintf("cut off after %d items (%d bytes): a list lookup reads at most %d MiB", e.Items, e.Bytes, ListLookupBytes>>20)
}

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

// List is Get for a lookup without a name, read in pages and cut off
// past ListLookupBytes (see listBounded). Helm's lookup lists with no
// options, so opts is not read.
func (c *lookupClient) List(_ context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l := c.lookup("")
	if err := c.recorder.begin(l, c.unmapped); err != nil {
		return nil, err
	}
	list, err := listBounded(c.recorder.ctx, c.resource())
	return list, c.recorder.end(l, err)
}

// listBounded lists res in pages, and fails with a *ListCutOffError once
// the items read pass ListLookupBytes. The pages are one consistent list
// (the API server's continue tokens keep the first page's
// resourceVersion), returned as one, as a list without a limit would be.
func listBounded(ctx context.Context, res dynamic.ResourceInterface) (*unstructured.UnstructuredList, error) {
	var all *unstructured.UnstructuredList
	size := 0
	opts := metav1.ListOptions{Limit: listFirstPageItems}
	for {
		page, err := res.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			size += jsonSize(item.Object)
		}
		if all == nil {
			all = page
		} else {
			all.Items = append(all.Items, page.Items...)
		}
		if size > ListLookupBytes {
			return nil, &ListCutOffError{Items: len(all.Items), Bytes: size}
		}
		opts.Continue = page.GetContinue()
		if opts.Continue == "" {
			break
		}
		opts.Limit = listPageItems
		if n := len(all.Items); n > 0 && size > 0 {
			opts.Limit = min(listPageItems, max(1, int64((ListLookupBytes-size)/(size/n+1))+1))
		}
	}
	all.SetContinue("")
	all.SetRemainingItemCount(nil)
	return all, nil
}

// jsonSize is about the length of v's JSON (escapes aside): what an
// object read weighs, without encoding it again.
func jsonSize(v any) int {
	switch v := v.(type) {
	case map[string]any:
		n := 2 + max(len(v)-1, 0)
		for k, e := range v {
			n += len(k) + 3 + jsonSize(e)
		}
		return n
	case []any:
		n := 2 + max(len(v)-1, 0)
		for _, e := range v {
			n += jsonSize(e)
		}
		return n
	case string:
		return len(v) + 2
	case int64:
		var buf [20]byte
		return len(strconv.AppendInt(buf[:0], v, 10))
	case float64:
		var buf [32]byte
		return len(strconv.AppendFloat(buf[:0], v, 'g', -1, 64))
	case bool:
		if v {
			return 4
		}
		return 5
	}
	return 4 // null, and what JSON does not decode to
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

// Lookups makes the lookups of a render that runs in another process
// (internal/sandbox), as that process's chart asks for them: each as
// Helm's lookup function makes it, through the recorder Render's own
// lookups go through, so that they are read as the caller's client,
// bounded and recorded alike. The process that renders holds no client,
// and what it renders is recorded here, where it cannot be misreported.
// A Lookups is for one render, and one goroutine.
type Lookups struct{ rec *recorder }

// NewLookups returns the lookups of one render on c, read with ctx.
func NewLookups(ctx context.Context, c Cluster) *Lookups {
	return &Lookups{rec: newRecorder(ctx, c)}
}

// Lookup is Helm's lookup function (engine.newLookupFunction, alike in
// Helm 3 and 4), the namespace given only for a namespaced kind, but it
// returns a NotFound as the error it is: the renderer's own lookup turns
// it into the empty map Helm gives a template. It returns the object, or
// for a lookup without a name the list's content.
func (l *Lookups) Lookup(apiVersion, kind, namespace, name string) (map[string]any, error) {
	c, namespaced, err := l.rec.GetClientFor(apiVersion, kind)
	if err != nil {
		return nil, err
	}
	var client dynamic.ResourceInterface = c
	if namespaced && namespace != "" {
		client = c.Namespace(namespace)
	}
	if name != "" {
		obj, err := client.Get(l.rec.ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return obj.UnstructuredContent(), nil
	}
	list, err := client.List(l.rec.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.UnstructuredContent(), nil
}

// Recorded are the lookups made, each once, in the order they were first
// made: the render's Output.Lookups.
func (l *Lookups) Recorded() []Lookup { return l.rec.lookups }

// Failed is the lookup that failed, or nil. Helm stops a render at its
// first failed lookup, and this is the render's error then, as Render
// returns it.
func (l *Lookups) Failed() *LookupError { return l.rec.failed }

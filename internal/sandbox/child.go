package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"

	"github.com/helm-locker/helm-locker/internal/render"
)

// Subcommand is the hidden subcommand of cmd/helm-locker that runs
// RunChild: a Renderer starts its own executable with it.
const Subcommand = "render-sandbox"

// RunChild is the child's side of a render: the process a Renderer
// started with Subcommand calls it, and exits with its error. It renders
// one job read from its descriptor 3 with render.Render, asks its parent
// for each lookup through descriptors 4 and 3, and writes the render's end
// to descriptor 4.
func RunChild(ctx context.Context) error {
	// The kernel's OOM killer, should the container run out of memory
	// (several renders near their cap, and the locker), then takes the
	// render first, not the locker: a process may raise its own score.
	// Where /proc cannot be written, the cap still holds.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	in, out := os.NewFile(3, "from-parent"), os.NewFile(4, "to-parent")
	defer in.Close()
	defer out.Close()
	if err := serve(ctx, in, out); err != nil {
		return fmt.Errorf("%s renders for the helm-locker that starts it, over its descriptors 3 and 4: %w", Subcommand, err)
	}
	return nil
}

// serve renders the job read from in, and writes its end to out.
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	var j job
	if err := readFrame(in, maxToChild, &j); err != nil {
		return fmt.Errorf("reading the job: %w", err)
	}
	end := &done{}
	rel, err := render.DecodeUnchecked(j.Helm, j.Release)
	if err == nil {
		p := &parent{in: in, out: out}
		var o *render.Output
		o, err = render.Render(ctx, rel, render.Cluster{KubeVersion: j.KubeVersion, APIVersions: j.APIVersions, Client: parentClient{p}, Mapper: kindMapper{}})
		if p.err != nil {
			// The parent is gone, or broke the protocol: nothing to
			// report to.
			return p.err
		}
		if err == nil {
			end = &done{Manifest: o.Manifest, ReadsAPIVersions: o.ReadsAPIVersions, ReadsKubeVersion: o.ReadsKubeVersion}
		}
	}
	if err != nil {
		end.Failure = &failure{Message: err.Error()}
		var nr *render.NotRenderableError
		if errors.As(err, &nr) {
			end.Failure = &failure{Message: nr.Err.Error(), NotRenderable: &notRenderable{Chart: nr.Chart, Dependencies: nr.Dependencies}}
		}
	}
	return writeFrame(out, fromChild{Done: end})
}

// parent is the child's way to its parent's lookups.
type parent struct {
	in  io.Reader
	out io.Writer
	// err is the first failure to talk to the parent: after it, every
	// lookup fails without asking.
	err error
}

// lookup asks the parent for l, and waits for its answer.
func (p *parent) lookup(l lookupCall) (*lookupAnswer, error) {
	if p.err != nil {
		return nil, p.err
	}
	var a lookupAnswer
	if p.err = writeFrame(p.out, fromChild{Lookup: &l}); p.err == nil {
		p.err = readFrame(p.in, maxToChild, &a)
	}
	if p.err != nil {
		p.err = fmt.Errorf("asking the parent for a lookup: %w", p.err)
		return nil, p.err
	}
	return &a, nil
}

// kindMapper is the child's RESTMapper: the child knows no resources, and
// its parent maps each kind, as render.Lookups does, with its own
// RESTMapper. So kindMapper names the kind where the resource goes, for
// parentClient to send it, and calls every kind namespaced, so that the
// parent is given the namespace a template gave: it reads a cluster-scoped
// kind without it, as Helm does.
type kindMapper struct{ meta.RESTMapper }

func (kindMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return &meta.RESTMapping{
		Resource:         schema.GroupVersionResource{Group: gk.Group, Version: versions[0], Resource: gk.Kind},
		GroupVersionKind: gk.WithVersion(versions[0]),
		Scope:            meta.RESTScopeNamespace,
	}, nil
}

// parentClient is the child's dynamic client: each read is a lookup the
// parent makes. It implements only the reads Helm's lookup makes.
type parentClient struct{ p *parent }

func (c parentClient) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return &parentResource{p: c.p, call: lookupCall{APIVersion: gvr.GroupVersion().String(), Kind: gvr.Resource}}
}

type parentResource struct {
	dynamic.NamespaceableResourceInterface
	p    *parent
	call lookupCall
}

func (r *parentResource) Namespace(ns string) dynamic.ResourceInterface {
	in := *r
	in.call.Namespace = ns
	return &in
}

func (r *parentResource) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*unstructured.Unstructured, error) {
	obj, err := r.read(name)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func (r *parentResource) List(_ context.Context, _ metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	content, err := r.read("")
	if err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetUnstructuredContent(content)
	return list, nil
}

// read asks the parent for the lookup of name ("" for a list), and
// decodes its answer as the client the parent read with did: numbers that
// are integers as int64, as templates print them.
func (r *parentResource) read(name string) (map[string]any, error) {
	call := r.call
	call.Name = name
	a, err := r.p.lookup(call)
	switch {
	case err != nil:
		return nil, err
	case a.NotFound:
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: schema.FromAPIVersionAndKind(call.APIVersion, call.Kind).Group, Resource: call.Kind}, name)
	case a.Error != "":
		return nil, errors.New(a.Error)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(a.Object, &obj); err != nil {
		return nil, fmt.Errorf("decoding the parent's answer: %w", err)
	}
	return obj, nil
}

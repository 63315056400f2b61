package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"helm.sh/helm/v3/pkg/action"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/sandbox"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// hiddenValue stands, on both sides of a diff, for each value of a Secret
// the user may not read.
const hiddenValue = "(hidden: you may not read this Secret)"

// rerenderDiffs renders the chart of release rk again, with cfg's
// credentials, against the cluster as it is now, and returns how each
// object it renders differently differs from the stored one. With hr, the
// HelmRelease that locks rk, it renders the chart hr's status.verified
// trusts, and only while its Secret holds what was verified: a chart a
// Secret writer forged would otherwise run with the credentials of
// whoever runs diff. Without one, nothing verified any revision, so it
// renders the latest deployed revision as its Secret stands, and warns
// on warn that it does.
func rerenderDiffs(ctx context.Context, cfg *rest.Config, rk v1alpha1.ReleaseKey, hr *v1alpha1.HelmRelease, warn io.Writer) ([]shownDiff, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rel, err := releaseToRender(ctx, kube, rk, hr, warn)
	if err != nil {
		return nil, err
	}
	// What Helm gives templates as .Capabilities, read as Helm reads it.
	disc := memory.NewMemCacheClient(kube.Discovery())
	version, err := disc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	apiVersions, err := action.GetVersionSet(disc)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's groups and kinds: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(disc)
	if hr != nil && hr.Spec.ChartRef != nil {
		if rel, err = withChartRef(ctx, dyn, mapper, hr, rel); err != nil {
			return nil, err
		}
	}
	cluster := render.Cluster{KubeVersion: version.GitVersion, APIVersions: apiVersions, Client: dyn, Mapper: mapper}
	// Rendering a chart is running code: each render runs in a process
	// of its own, with the operator's default deadline and memory cap,
	// and its lookups are made here, with the user's credentials.
	renderer := sandbox.New(sandbox.DefaultOptions())
	renderOnce := func() (string, error) {
		out, err := renderer.Render(ctx, rel, cluster)
		if err != nil {
			return "", fmt.Errorf("rendering revision %d of release %s/%s: %w", rel.Version, rk.Namespace, rk.Name, err)
		}
		return out.Manifest, nil
	}
	now, err := renderOnce()
	if err != nil {
		return nil, err
	}
	changes, err := rel.Compare(now, now)
	if err == nil && len(changes) > 0 {
		// What a second render with the same inputs sets otherwise is
		// generated (randAlphaNum, genCA) and left out.
		again, renderErr := renderOnce()
		if renderErr != nil {
			return nil, renderErr
		}
		changes, err = rel.Compare(now, again)
	}
	if err != nil {
		return nil, fmt.Errorf("comparing the render of revision %d with its manifest: %w", rel.Version, err)
	}
	return renderDiffs(ctx, changes, rel.Helm, rel.Manifest, now, rk.Namespace, mapper, kube.AuthorizationV1())
}

// releaseToRender decodes the revision rerenderDiffs renders: the one
// whose chart hr's verification trusts, or, with no hr, rk's latest
// deployed one, unverified.
func releaseToRender(ctx context.Context, kube kubernetes.Interface, rk v1alpha1.ReleaseKey, hr *v1alpha1.HelmRelease, warn io.Writer) (*render.Release, error) {
	if hr == nil {
		secret, err := deployedReleaseSecret(ctx, kube, rk)
		if err != nil {
			return nil, err
		}
		rel, err := render.DecodeUntrusted(secret, rk.Namespace, rk.Name)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(warn, "Warning: no HelmRelease you may read locks release %s/%s, so nothing verified its revision %d: rendering the chart its Secret holds now, which anyone who may write Secrets in %s could have written\n", rk.Namespace, rk.Name, rel.Version, rk.Namespace)
		return rel, nil
	}
	v := hr.Status.Verified
	if v == nil || v.Release != rk {
		return nil, fmt.Errorf("HelmRelease %s/%s has verified no revision of release %s/%s yet: there is no chart it trusts to render", hr.Namespace, hr.Name, rk.Namespace, rk.Name)
	}
	chart := v.TrustedChart()
	name := storage.SecretName(rk.Name, chart.Revision)
	secret, err := kube.CoreV1().Secrets(rk.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the Secret of revision %d, whose chart HelmRelease %s/%s trusts: %w", chart.Revision, hr.Namespace, hr.Name, err)
	}
	return render.Decode(secret, rk.Namespace, rk.Name, render.Trusted{Revision: chart.Revision, ManifestDigest: chart.ManifestDigest, ChartDigest: chart.ChartDigest})
}

// withChartRef is rel rendering the chart hr's spec.chartRef names, as
// the lock renders it: the source read and its artifact downloaded with
// the user's credentials, its digest checked, within the locker's default
// caps, and its chart taken only if its own files are rel's stored
// chart's. The artifact's URL is the source's, often one served only
// inside the cluster: one this process cannot reach is an error that
// says so.
func withChartRef(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, hr *v1alpha1.HelmRelease, rel *render.Release) (*render.Release, error) {
	ref := *hr.Spec.ChartRef
	if ref.Namespace == "" {
		ref.Namespace = hr.Namespace
	}
	what := fmt.Sprintf("spec.chartRef %s %s/%s of HelmRelease %s/%s", ref.Kind, ref.Namespace, ref.Name, hr.Namespace, hr.Name)
	m, err := mapper.RESTMapping(schema.GroupKind{Group: mlv1.SourceGroup, Kind: ref.Kind}, artifact.SourceVersions...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	src, err := dyn.Resource(m.Resource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	a, ok := artifact.FromStatus(src.Object)
	if !ok {
		return nil, fmt.Errorf("%s has no artifact yet (status.artifact)", what)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	files, err := artifact.Fetch(ctx, http.DefaultClient, a, artifact.Limits{})
	if err != nil {
		return nil, fmt.Errorf("%s, revision %s (served at %s, which may be reachable only inside the cluster): %w", what, a.Revision, a.URL, err)
	}
	withChart, err := rel.WithChart(files)
	if err != nil {
		return nil, fmt.Errorf("%s, revision %s: %w", what, a.Revision, err)
	}
	return withChart, nil
}

// deployedReleaseSecret is the Secret of rk's latest deployed revision.
// A revision Helm is still applying (pending-upgrade) or failed is not
// what the cluster runs, so it is skipped, as Helm's --reuse-values does.
func deployedReleaseSecret(ctx context.Context, kube kubernetes.Interface, rk v1alpha1.ReleaseKey) (*corev1.Secret, error) {
	secrets, err := releaseSecrets(ctx, kube, rk.Namespace, rk.Name)
	if err != nil {
		return nil, err
	}
	var deployed []*corev1.Secret
	for _, s := range secrets {
		if storage.Deployed(s.Labels[storage.LabelStatus]) {
			deployed = append(deployed, s)
		}
	}
	latest, ok := storage.Latest(deployed)
	if !ok {
		return nil, fmt.Errorf("release %s/%s has no deployed revision", rk.Namespace, rk.Name)
	}
	return latest, nil
}

// renderDiffs shows each change as the unified diff of the stored object
// (-) and the rendered one (+), both manifests read as Helm h, which wrote
// the revision and rendered it again, stores them. The rendered side is
// the stored object with only the changed paths taken from the render, so
// that values the chart generates anew at every render do not show. The
// values of a Secret show only to a user who may get it. Objects that name
// no namespace are shown in the release's, where Helm puts them.
func renderDiffs(ctx context.Context, changes []render.Change, h manifest.Helm, stored, rendered, namespace string, mapper meta.RESTMapper, reviews authorizationv1client.SelfSubjectAccessReviewsGetter) ([]shownDiff, error) {
	was, err := objectsByChangeName(stored, h)
	if err != nil {
		return nil, fmt.Errorf("the stored manifest: %w", err)
	}
	is, err := objectsByChangeName(rendered, h)
	if err != nil {
		return nil, fmt.Errorf("the rendered manifest: %w", err)
	}
	var out []shownDiff
	for _, ch := range changes {
		from, to := was[ch.Object], is[ch.Object]
		var head string
		switch {
		case ch.Added:
			from, head = nil, "rendered now, not in the stored manifest"
		case ch.Removed:
			to, head = nil, "in the stored manifest, no longer rendered"
		default:
			if to, err = withPaths(from, to, ch.Paths); err != nil {
				return nil, fmt.Errorf("%s: %w", ch.Object, err)
			}
			head = "renders differently at " + strings.Join(ch.Paths, ", ")
		}
		obj := from
		if obj == nil {
			obj = to
		}
		if obj == nil {
			return nil, fmt.Errorf("%s: in neither manifest", ch.Object)
		}
		ref := shownRef(obj, namespace, mapper)
		if isSecret(obj) {
			ok, err := mayGetSecret(ctx, reviews, ref)
			if err != nil {
				return nil, err
			}
			if !ok {
				from, to = hideSecretValues(from), hideSecretValues(to)
			}
		}
		text, err := storedRenderedDiff(ref.Name, from, to)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.Object, err)
		}
		out = append(out, shownDiff{head: fmt.Sprintf("# %s %s: %s", kindOf(obj), objectName(ref), head), text: text})
	}
	return out, nil
}

// objectsByChangeName parses a manifest as Helm h stores it into its
// objects, by the name render.Change gives them. Where two documents
// declare one object, the last wins, as in Helm's apply and in Compare.
func objectsByChangeName(m string, h manifest.Helm) (map[string]map[string]any, error) {
	objs, err := manifest.ParseRelease(m, h)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]any, len(objs))
	for _, o := range objs {
		name := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			name = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		out[name] = o.Object
	}
	return out, nil
}

// shownRef names obj where it lives: in the release namespace when it is
// of a namespaced kind and names none. A kind the cluster does not serve
// is shown as written.
func shownRef(obj map[string]any, namespace string, mapper meta.RESTMapper) engine.ObjectRef {
	field := func(key string) string {
		m, _ := obj["metadata"].(map[string]any)
		s, _ := m[key].(string)
		return s
	}
	ref := engine.ObjectRef{Namespace: field("namespace"), Name: field("name")}
	if ref.Namespace != "" {
		return ref
	}
	apiVersion, _ := obj["apiVersion"].(string)
	gvk := schema.FromAPIVersionAndKind(apiVersion, kindOf(obj))
	if mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ref.Namespace = namespace
	}
	return ref
}

func kindOf(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	return kind
}

// isSecret says obj is a core Secret.
func isSecret(obj map[string]any) bool {
	apiVersion, _ := obj["apiVersion"].(string)
	return apiVersion == "v1" && kindOf(obj) == "Secret"
}

// mayGetSecret asks the API server whether the user may get the Secret
// ref: a release's manifest holds its Secrets' values, and who may read
// the release may not read them all (a chart can put a Secret in another
// namespace). A review that fails hides the values.
func mayGetSecret(ctx context.Context, reviews authorizationv1client.SelfSubjectAccessReviewsGetter, ref engine.ObjectRef) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ref.Namespace, Verb: "get", Resource: "secrets", Name: ref.Name},
	}}
	res, err := reviews.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil
	}
	return res.Status.Allowed, nil
}

// hideSecretValues returns a copy of the Secret obj with every value
// under data and stringData replaced by hiddenValue. The keys stay, so
// that a key added or removed still shows.
func hideSecretValues(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	for _, field := range []string{"data", "stringData"} {
		values, present := obj[field]
		if !present || values == nil {
			continue
		}
		m, ok := values.(map[string]any)
		if !ok {
			out[field] = hiddenValue
			continue
		}
		hidden := make(map[string]any, len(m))
		for k := range m {
			hidden[k] = hiddenValue
		}
		out[field] = hidden
	}
	return out
}

// withPaths returns a copy of from with the value of to at each of paths,
// RFC 6901 JSON pointers as render.Compare gives them: at a path to
// lacks, from's value is removed. Compare names a path only where from
// and to have the same containers above it, so each parent exists.
func withPaths(from, to map[string]any, paths []string) (map[string]any, error) {
	out := runtime.DeepCopyJSON(from)
	for _, p := range paths {
		tokens, err := pointerTokens(p)
		if err != nil {
			return nil, err
		}
		if len(tokens) == 0 {
			return runtime.DeepCopyJSON(to), nil
		}
		value, present := lookupPointer(to, tokens)
		if present {
			value = runtime.DeepCopyJSONValue(value)
		}
		parent, _ := lookupPointer(out, tokens[:len(tokens)-1])
		last := tokens[len(tokens)-1]
		switch c := parent.(type) {
		case map[string]any:
			if present {
				c[last] = value
			} else {
				delete(c, last)
			}
		case []any:
			i, err := strconv.Atoi(last)
			if err != nil || i < 0 || i >= len(c) || !present {
				return nil, fmt.Errorf("%s: no such list entry", p)
			}
			c[i] = value
		default:
			return nil, fmt.Errorf("%s: no object or list above it", p)
		}
	}
	return out, nil
}

// pointerTokens splits an RFC 6901 JSON pointer into its unescaped
// reference tokens.
func pointerTokens(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q is no JSON pointer", p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// lookupPointer is the value at tokens under v, and whether there is one.
func lookupPointer(v any, tokens []string) (any, bool) {
	for _, t := range tokens {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[t]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// storedRenderedDiff is the unified diff, in YAML, of the stored object
// (-) and the rendered one (+); a nil side is an object absent from
// that manifest.
func storedRenderedDiff(name string, stored, rendered map[string]any) (string, error) {
	lines := func(obj map[string]any) ([]string, error) {
		if obj == nil {
			return nil, nil
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		return difflib.SplitLines(strings.TrimSuffix(string(data), "\n")), nil
	}
	a, err := lines(stored)
	if err != nil {
		return "", err
	}
	b, err := lines(rendered)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: a, B: b, FromFile: name + " (stored)", ToFile: name + " (rendered now)", Context: 3})
}

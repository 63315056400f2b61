package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// newDiffCommand shows drift as kubectl diff shows changes, with the
// authors of each, and how a release's chart renders now.
func newDiffCommand() *cobra.Command {
	var (
		client        clientFlags
		files         []string
		kustomizeDir  string
		lockNamespace string
		color         string
		rerender      bool
		helm          = newHelmFlag()
		timeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "diff (helmrelease/NAME | manifestlock/NAME | -f FILE | -k DIR | --rerender [-n NAMESPACE] RELEASE)",
		Short: "Show how live objects differ from what a lock declares, or a chart from what it renders now",
		Long: `diff compares live objects with what a lock declares and prints a unified diff
per object that differs (- live, + declared), naming the field managers that
changed it. It writes nothing.

  helmrelease/NAME  the objects of the release a HelmRelease CR names, as the
                    locker holds them (its ignore rules apply)
  manifestlock/NAME the objects a ManifestLock declares, as the locker holds
                    them
  -f FILE|DIR|-     the objects of YAML or JSON files, as "helm-locker lock -f"
                    would hold them; -n is the namespace of objects that name
                    none. They are read as Helm 4 applies a manifest (as
                    kubectl does); --helm 3 reads them as Helm 3 does
  -k DIR            the objects a folder builds to, as a ManifestLock's
                    spec.sourceRef builds it: Kustomize where it holds a
                    kustomization (builtin plugins, nothing remote), its YAML
                    files otherwise

With --rerender, diff renders the chart of a Helm release again and prints
how the render differs from the manifest Helm stored (- stored, + rendered
now), as "helm upgrade --reuse-values" of the same chart would render it
against the cluster as it is now. When a HelmRelease locks the release, it
renders the chart that lock verified (status.verified), and refuses one
whose Secret was rewritten since; with no lock it renders the latest
deployed revision as its Secret stands, and warns that nothing verified it.
--timeout bounds it:

  --rerender RELEASE            the release RELEASE in -n NAMESPACE (as helm -n)
  --rerender helmrelease/NAME   the release a HelmRelease CR names

The chart's lookups read with your own credentials, and .Capabilities are
the cluster's. The chart is rendered twice, and what differs between the two
renders (randAlphaNum, genCA, now) is generated, not decided by the cluster,
and is left out. The values of a Secret show only if you may get that Secret;
otherwise they read "` + hiddenValue + `". A lookup you may not make is an
error that names it.

Exit status: 0 when nothing differs, 1 when something does, 2 on an error or
a wrong call, as kubectl diff.`,
		Example: `  helm-locker diff helmrelease/web
  helm-locker diff -f app.yaml -n apps
  helm-locker diff --rerender -n apps web`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if kustomizeDir != "" {
				if len(files) > 0 {
					return usageError(cmd, errors.New("-f and -k name what to diff two ways: choose one"))
				}
				files = []string{kustomizeDir}
			}
			target, err := parseDiffTarget(args, files, rerender)
			target.kustomize = kustomizeDir != ""
			if err != nil {
				return usageError(cmd, err)
			}
			target.helm, target.timeout = helm.h, timeout
			if !slices.Contains([]string{"auto", "always", "never"}, color) {
				return usageError(cmd, fmt.Errorf("--color %s: want auto, always or never", color))
			}
			diffs, err := runDiff(cmd, &client, target, lockNamespace)
			if err != nil {
				return &exitError{exitDiffFailed, err}
			}
			out := cmd.OutOrStdout()
			printDiffs(out, diffs, color == "always" || (color == "auto" && isTerminal(out)))
			if len(diffs) > 0 {
				return &exitError{code: exitDiffers}
			}
			return nil
		},
	}
	client.add(cmd)
	cmd.Flags().StringSliceVarP(&files, "filename", "f", nil, "YAML or JSON file, folder of them, or - for standard input")
	cmd.Flags().StringVarP(&kustomizeDir, "kustomize", "k", "", "folder to build as a ManifestLock's spec.sourceRef is built (Kustomize, or its YAML files)")
	cmd.Flags().StringVar(&lockNamespace, "lock-namespace", "cattle-helm-system", "namespace of the HelmRelease or ManifestLock")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the diff: auto (on a terminal, unless NO_COLOR is set), always or never")
	helm.add(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long --rerender may take: its reads, renders and lookups")
	cmd.Flags().BoolVar(&rerender, "rerender", false, "render the release's chart again, as you, against the cluster as it is now, and diff the render with the manifest Helm stored")
	return cmd
}

// targetKind is what diff compares.
type targetKind int

const (
	targetFiles targetKind = iota
	targetHelmRelease
	targetManifestLock
	// targetRelease is a Helm release by name, in -n, for --rerender.
	targetRelease
)

// diffTarget is what diff's arguments name.
type diffTarget struct {
	kind  targetKind
	name  string
	files []string
	// kustomize says files is one folder to build as with -k.
	kustomize bool
	// helm is the Helm whose reading files are parsed with.
	helm manifest.Helm
	// timeout bounds a --rerender: its reads, renders and lookups.
	timeout time.Duration
	// rerender renders the release's chart again rather than diffing
	// its live objects.
	rerender bool
}

// parseDiffTarget reads what diff is asked to compare, before anything
// is read from the cluster: every error is one in how diff was called.
func parseDiffTarget(args, files []string, rerender bool) (diffTarget, error) {
	if rerender {
		switch {
		case len(files) > 0:
			return diffTarget{}, errors.New("--rerender renders a Helm release's chart; it takes no -f: name the release, --rerender -n NAMESPACE RELEASE")
		case len(args) == 0:
			return diffTarget{}, errors.New("--rerender needs a release: --rerender -n NAMESPACE RELEASE, or --rerender helmrelease/NAME")
		}
	} else if (len(args) == 0) == (len(files) == 0) {
		return diffTarget{}, errors.New("name either helmrelease/NAME, manifestlock/NAME or -f FILE, or --rerender RELEASE")
	}
	if len(files) > 0 {
		return diffTarget{kind: targetFiles, files: files}, nil
	}
	kind, name, ok := strings.Cut(args[0], "/")
	switch {
	case !ok && rerender:
		// Helm release names have no "/".
		return diffTarget{kind: targetRelease, name: args[0], rerender: true}, nil
	case ok && name != "" && slices.Contains([]string{"helmrelease", "helmreleases", "helmrelease.helm.cattle.io"}, kind):
		return diffTarget{kind: targetHelmRelease, name: name, rerender: rerender}, nil
	case ok && name != "" && slices.Contains([]string{"manifestlock", "manifestlocks", "manifestlock.helm-locker.io"}, kind):
		if rerender {
			return diffTarget{}, fmt.Errorf("%s: a ManifestLock has no chart to render again; --rerender takes a Helm release or helmrelease/NAME", args[0])
		}
		return diffTarget{kind: targetManifestLock, name: name}, nil
	case rerender:
		return diffTarget{}, fmt.Errorf("%s: want a Helm release name or helmrelease/NAME", args[0])
	case !ok:
		return diffTarget{}, fmt.Errorf("%s: want helmrelease/NAME or manifestlock/NAME; to render the Helm release %s again, --rerender %s", args[0], args[0], args[0])
	}
	return diffTarget{}, fmt.Errorf("%s: want helmrelease/NAME or manifestlock/NAME", args[0])
}

// runDiff reads what target names and diffs it.
func runDiff(cmd *cobra.Command, client *clientFlags, target diffTarget, lockNamespace string) ([]shownDiff, error) {
	cfg, namespace, err := client.load()
	if err != nil {
		return nil, err
	}
	ctx := cmd.Context()
	if target.rerender {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		rk := v1alpha1.ReleaseKey{Namespace: namespace, Name: target.name}
		var hr *v1alpha1.HelmRelease
		if target.kind == targetHelmRelease {
			if hr, err = readHelmRelease(cmd, dyn, lockNamespace, target.name); err != nil {
				return nil, err
			}
			rk = hr.Spec.Release
		} else if hr, err = lockOf(ctx, dyn, lockNamespace, rk); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, target.timeout)
		defer cancel()
		return rerenderDiffs(ctx, cfg, rk, hr, cmd.ErrOrStderr())
	}
	diffs, err := lockDiff(cmd, cfg, namespace, target, lockNamespace)
	return lockDiffs(diffs), err
}

// lockDiff diffs the live objects of target with what it declares.
func lockDiff(cmd *cobra.Command, cfg *rest.Config, namespace string, target diffTarget, lockNamespace string) ([]engine.ObjectDiff, error) {
	l, err := engine.NewLocker(cfg, engine.Options{})
	if err != nil {
		return nil, err
	}
	if target.kind == targetFiles {
		objs, err := readObjects(target.files, target.kustomize, cmd.InOrStdin(), target.helm)
		if err != nil {
			return nil, err
		}
		return l.Diff(cmd.Context(), objs, engine.DefaultNamespace(namespace))
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if target.kind == targetManifestLock {
		return diffManifestLock(cmd, l, dyn, lockNamespace, target.name)
	}
	hr, err := readHelmRelease(cmd, dyn, lockNamespace, target.name)
	if err != nil {
		return nil, err
	}
	ignore, err := declare.Ignore(hr.Spec.Ignore)
	if err != nil {
		return nil, fmt.Errorf("HelmRelease %s/%s: %w", lockNamespace, target.name, err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rk := hr.Spec.Release
	secret, err := releaseSecret(cmd, kube, rk.Namespace, rk.Name, 0)
	if err != nil {
		return nil, err
	}
	rel, err := storage.Read(secret, rk.Namespace, rk.Name)
	if err != nil {
		return nil, err
	}
	objs, err := rel.Objects()
	if err != nil {
		return nil, err
	}
	objs, _ = declare.SplitOptedOut(objs)
	opts := []engine.SetOption{engine.DefaultNamespace(rk.Namespace), engine.IgnoreFunc(ignore)}
	if m := rel.ApplyManager(); m != "" {
		opts = append(opts, engine.ServerSideApply(m))
	}
	return l.Diff(cmd.Context(), objs, opts...)
}

// lockOf is the HelmRelease that locks release rk, nil if none the user
// may read does: any the user may list, in every namespace or, failing
// that, in lockNamespace. Of several, the registration namespace's is
// taken, as the locker holds it.
func lockOf(ctx context.Context, dyn dynamic.Interface, lockNamespace string, rk v1alpha1.ReleaseKey) (*v1alpha1.HelmRelease, error) {
	list, err := dyn.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		list, err = dyn.Resource(v1alpha1.Resource).Namespace(lockNamespace).List(ctx, metav1.ListOptions{})
	}
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("finding the HelmRelease that locks release %s/%s: %w", rk.Namespace, rk.Name, err)
	}
	var found *v1alpha1.HelmRelease
	for i := range list.Items {
		hr := &v1alpha1.HelmRelease{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, hr) != nil || hr.Spec.Release != rk {
			continue
		}
		if found == nil || hr.Namespace == lockNamespace {
			found = hr
		}
	}
	return found, nil
}

// readHelmRelease reads the HelmRelease CR namespace/name.
func readHelmRelease(cmd *cobra.Command, dyn dynamic.Interface, namespace, name string) (*v1alpha1.HelmRelease, error) {
	u, err := dyn.Resource(v1alpha1.Resource).Namespace(namespace).Get(cmd.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading HelmRelease %s/%s: %w", namespace, name, err)
	}
	hr := &v1alpha1.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, hr); err != nil {
		return nil, fmt.Errorf("HelmRelease %s/%s: %w", namespace, name, err)
	}
	return hr, nil
}

// diffManifestLock diffs the objects a ManifestLock declares, as it holds
// them.
func diffManifestLock(cmd *cobra.Command, l *engine.Locker, dyn dynamic.Interface, namespace, name string) ([]engine.ObjectDiff, error) {
	u, err := dyn.Resource(mlv1.Resource).Namespace(namespace).Get(cmd.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ManifestLock %s/%s: %w", namespace, name, err)
	}
	ml := &mlv1.ManifestLock{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ml); err != nil {
		return nil, fmt.Errorf("ManifestLock %s/%s: %w", namespace, name, err)
	}
	text := ml.Spec.Manifest
	if from := ml.Spec.ManifestFrom; from != nil {
		r, kind := from.ConfigMapRef, "configmaps"
		if r == nil {
			r, kind = from.SecretRef, "secrets"
		}
		if r == nil {
			return nil, fmt.Errorf("ManifestLock %s/%s names no manifest", namespace, name)
		}
		src, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: kind}).Namespace(namespace).Get(cmd.Context(), r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the manifest of ManifestLock %s/%s: %w", namespace, name, err)
		}
		value, _, _ := unstructured.NestedString(src.Object, "data", r.Key)
		if kind == "secrets" {
			decoded, err := base64.StdEncoding.DecodeString(value)
			if err != nil {
				return nil, fmt.Errorf("the manifest of ManifestLock %s/%s: %w", namespace, name, err)
			}
			value = string(decoded)
		}
		text = value
	}
	objs, err := manifest.Parse(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the manifest of ManifestLock %s/%s: %w", namespace, name, err)
	}
	objs, _ = declare.SplitOptedOut(objs)
	ignore, err := declare.Ignore(ml.Spec.Ignore)
	if err != nil {
		return nil, fmt.Errorf("ManifestLock %s/%s: %w", namespace, name, err)
	}
	defaultNamespace := ml.Spec.Namespace
	if defaultNamespace == "" {
		defaultNamespace = ml.Namespace
	}
	return l.Diff(cmd.Context(), objs, engine.DefaultNamespace(defaultNamespace), engine.IgnoreFunc(ignore))
}

// readFiles parses the YAML or JSON of files, folders of them (not
// recursively) and standard input ("-"), in order, as Helm h would apply
// them.
func readFiles(names []string, stdin io.Reader, h manifest.Helm) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	parse := func(name string, r io.Reader) error {
		text, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		parsed, err := manifest.ParseRelease(string(text), h)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		objs = append(objs, parsed...)
		return nil
	}
	for _, name := range names {
		if name == "-" {
			if err := parse("standard input", stdin); err != nil {
				return nil, err
			}
			continue
		}
		paths := []string{name}
		if fi, err := os.Stat(name); err != nil {
			return nil, err
		} else if fi.IsDir() {
			entries, err := os.ReadDir(name)
			if err != nil {
				return nil, err
			}
			paths = paths[:0]
			for _, e := range entries {
				if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					paths = append(paths, filepath.Join(name, e.Name()))
				}
			}
		}
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				return nil, err
			}
			err = parse(p, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// ANSI colours of diff lines.
const (
	red   = "\x1b[31m"
	green = "\x1b[32m"
	cyan  = "\x1b[36m"
	bold  = "\x1b[1m"
	reset = "\x1b[0m"
)

// shownDiff is one object's diff as diff prints it: a line naming the
// object and where it differs, and a unified diff.
type shownDiff struct {
	head string
	text string
}

// lockDiffs are the diffs of objects with what a lock declares, each
// headed by where it differs and who changed it.
func lockDiffs(diffs []engine.ObjectDiff) []shownDiff {
	var out []shownDiff
	for _, d := range diffs {
		head := fmt.Sprintf("# %s %s", d.Kind, objectName(d.Ref))
		switch {
		case d.Missing:
			head += ": does not exist"
		default:
			head += ": differs at " + strings.Join(d.Paths, ", ")
			if len(d.Managers) > 0 {
				var names []string
				for _, m := range d.Managers {
					names = append(names, fmt.Sprintf("%s (%s)", m.Name, m.Operation))
				}
				head += "; changed by " + strings.Join(names, ", ")
			}
		}
		out = append(out, shownDiff{head: head, text: d.Text})
	}
	return out
}

// printDiffs writes each object's diff under its head line.
func printDiffs(w io.Writer, diffs []shownDiff, colored bool) {
	paint := func(code, line string) string {
		if !colored {
			return line
		}
		return code + line + reset
	}
	for _, d := range diffs {
		fmt.Fprintln(w, paint(bold, d.head))
		for line := range strings.Lines(d.text) {
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
				line = paint(bold, line)
			case strings.HasPrefix(line, "+"):
				line = paint(green, line)
			case strings.HasPrefix(line, "-"):
				line = paint(red, line)
			case strings.HasPrefix(line, "@@"):
				line = paint(cyan, line)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(r engine.ObjectRef) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// isTerminal reports whether w is a terminal that takes colour.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/declare"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// exitError ends the process with code, printing err if it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// newDiffCommand shows drift as kubectl diff shows changes, with the
// authors of each.
func newDiffCommand() *cobra.Command {
	var (
		client        clientFlags
		files         []string
		lockNamespace string
		color         string
	)
	cmd := &cobra.Command{
		Use:   "diff (helmrelease/NAME | manifestlock/NAME | -f FILE)",
		Short: "Show how live objects differ from what a lock declares",
		Long: `diff compares live objects with what a lock declares and prints a unified diff
per object that differs (- live, + declared), naming the field managers that
changed it. It writes nothing.

  helmrelease/NAME  the objects of the release a HelmRelease CR names, as the
                    locker holds them (its ignore rules apply)
  manifestlock/NAME the objects a ManifestLock declares, as the locker holds
                    them
  -f FILE|DIR|-     the objects of YAML or JSON files, as "helm-locker lock -f"
                    would hold them; -n is the namespace of objects that name
                    none

Exit status: 0 when every object is as declared, 1 when some differ, 2 on an
error, as kubectl diff.`,
		Example: `  helm-locker diff helmrelease/web
  helm-locker diff -f app.yaml -n apps`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0) == (len(files) == 0) {
				return &exitError{2, errors.New("name either helmrelease/NAME, manifestlock/NAME or -f FILE")}
			}
			if !slices.Contains([]string{"auto", "always", "never"}, color) {
				return &exitError{2, fmt.Errorf("--color %s: want auto, always or never", color)}
			}
			diffs, err := runDiff(cmd, &client, args, files, lockNamespace)
			if err != nil {
				return &exitError{2, err}
			}
			out := cmd.OutOrStdout()
			printDiffs(out, diffs, color == "always" || (color == "auto" && isTerminal(out)))
			if len(diffs) > 0 {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	client.add(cmd)
	cmd.Flags().StringSliceVarP(&files, "filename", "f", nil, "YAML or JSON file, folder of them, or - for standard input")
	cmd.Flags().StringVar(&lockNamespace, "lock-namespace", "cattle-helm-system", "namespace of the HelmRelease or ManifestLock")
	cmd.Flags().StringVar(&color, "color", "auto", "colour the diff: auto (on a terminal, unless NO_COLOR is set), always or never")
	return cmd
}

// runDiff reads the declaration args or files name and diffs it.
func runDiff(cmd *cobra.Command, client *clientFlags, args, files []string, lockNamespace string) ([]engine.ObjectDiff, error) {
	cfg, namespace, err := client.load()
	if err != nil {
		return nil, err
	}
	l, err := engine.NewLocker(cfg, engine.Options{})
	if err != nil {
		return nil, err
	}
	if len(files) > 0 {
		objs, err := readFiles(files, cmd.InOrStdin())
		if err != nil {
			return nil, err
		}
		return l.Diff(cmd.Context(), objs, engine.DefaultNamespace(namespace))
	}
	kind, name, ok := strings.Cut(args[0], "/")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case ok && slices.Contains([]string{"manifestlock", "manifestlocks", "manifestlock.helm-locker.io"}, kind):
		return diffManifestLock(cmd, l, dyn, lockNamespace, name)
	case !ok || !slices.Contains([]string{"helmrelease", "helmreleases", "helmrelease.helm.cattle.io"}, kind):
		return nil, fmt.Errorf("%s: want helmrelease/NAME or manifestlock/NAME", args[0])
	}
	u, err := dyn.Resource(v1alpha1.Resource).Namespace(lockNamespace).Get(cmd.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading HelmRelease %s/%s: %w", lockNamespace, name, err)
	}
	hr := &v1alpha1.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, hr); err != nil {
		return nil, fmt.Errorf("HelmRelease %s/%s: %w", lockNamespace, name, err)
	}
	ignore, err := declare.Ignore(hr.Spec.Ignore)
	if err != nil {
		return nil, fmt.Errorf("HelmRelease %s/%s: %w", lockNamespace, name, err)
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
// recursively) and standard input ("-"), in order.
func readFiles(names []string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	parse := func(name string, r io.Reader) error {
		parsed, err := manifest.Parse(r)
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

// printDiffs writes each object's diff under a line naming it, where it
// differs and who changed it.
func printDiffs(w io.Writer, diffs []engine.ObjectDiff, colored bool) {
	paint := func(code, line string) string {
		if !colored {
			return line
		}
		return code + line + reset
	}
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
		fmt.Fprintln(w, paint(bold, head))
		for line := range strings.Lines(d.Text) {
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

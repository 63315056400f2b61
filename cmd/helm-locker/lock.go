package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// cliFieldManager names the CLI's writes of ManifestLocks.
const cliFieldManager = "helm-locker-cli"

// newLockCommand locks files the way kubectl apply applies them, through a
// ManifestLock that the operator holds from then on.
func newLockCommand() *cobra.Command {
	var (
		client        clientFlags
		files         []string
		kustomizeDir  string
		name          string
		lockNamespace string
		prune, warn   bool
		prevent       bool
		waitLocked    bool
		timeout       time.Duration
		output        string
		helm          = newHelmFlag()
	)
	cmd := &cobra.Command{
		Use:   "lock (-f FILE|DIR|- | -k DIR) [-n NAMESPACE] [--name NAME]",
		Short: "Lock the objects of YAML or JSON files with a ManifestLock",
		Long: `lock creates, or updates, a ManifestLock holding the objects of the files:
the operator applies what is missing and from then on reverts every edit and
recreates every deleted object. -n is the namespace of objects that name none
(the kubeconfig context's by default). The files are read as Helm 4 applies
a manifest, as kubectl does (--helm 3 reads them as Helm 3 does). The lock
itself goes in --lock-namespace. -k DIR locks what the folder builds to, as a
ManifestLock's spec.sourceRef builds it: Kustomize where it holds a
kustomization (builtin plugins only, nothing remote), else its YAML files.
lock waits until the ManifestLock says Locked, and prints
its status.`,
		Example: `  helm-locker lock -f app.yaml -n apps
  helm-locker lock -k overlays/prod --name prod -n apps --prune
  kustomize build overlays/prod | helm-locker lock -f - --name prod -n apps --prune`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(files) == 0 && kustomizeDir == "":
				return usageError(cmd, errors.New("name the files to lock with -f, or a folder to build with -k"))
			case len(files) > 0 && kustomizeDir != "":
				return usageError(cmd, errors.New("-f and -k name what to lock two ways: choose one"))
			case kustomizeDir != "":
				files = []string{kustomizeDir}
			}
			if output != "" && output != "yaml" && output != "json" {
				return usageError(cmd, fmt.Errorf("-o %s: want yaml or json", output))
			}
			if warn && prevent {
				return usageError(cmd, errors.New("--warn and --prevent ask for opposite modes: choose one"))
			}
			if name == "" {
				name = lockName(files[0])
			}
			if name == "" {
				return usageError(cmd, errors.New("name the lock with --name: it cannot be derived from standard input"))
			}
			cfg, namespace, err := client.load()
			if err != nil {
				return err
			}
			objs, err := readObjects(files, kustomizeDir != "", cmd.InOrStdin(), helm.h)
			if err != nil {
				return err
			}
			if len(objs) == 0 {
				return errors.New("the files declare no objects")
			}
			var docs []string
			for _, o := range objs {
				data, err := yaml.Marshal(o.Object)
				if err != nil {
					return err
				}
				docs = append(docs, string(data))
			}
			spec := map[string]any{"manifest": strings.Join(docs, "---\n"), "namespace": namespace, "prune": prune}
			switch {
			case warn:
				spec["mode"] = string(v1alpha1.ModeWarn)
			case prevent:
				spec["mode"] = string(v1alpha1.ModePrevent)
			}
			lockObj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
				"metadata": map[string]any{"name": name, "namespace": lockNamespace},
				"spec":     spec,
			}}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			locks := dyn.Resource(mlv1.Resource).Namespace(lockNamespace)
			applied, err := locks.Apply(cmd.Context(), name, lockObj, metav1.ApplyOptions{FieldManager: cliFieldManager, Force: true})
			if err != nil {
				return fmt.Errorf("writing ManifestLock %s/%s: %w", lockNamespace, name, err)
			}
			out := cmd.OutOrStdout()
			if output == "" {
				fmt.Fprintf(out, "manifestlock %s/%s: %d objects declared\n", lockNamespace, name, len(objs))
			}
			if !waitLocked {
				return printLock(out, applied, output)
			}
			ml, err := waitForLock(cmd.Context(), locks, name, applied.GetGeneration(), timeout)
			if ml != nil {
				if perr := printLock(out, ml, output); perr != nil {
					return errors.Join(err, perr)
				}
			}
			return err
		},
	}
	client.add(cmd)
	f := cmd.Flags()
	f.StringSliceVarP(&files, "filename", "f", nil, "YAML or JSON file, folder of them, or - for standard input")
	f.StringVarP(&kustomizeDir, "kustomize", "k", "", "folder to build as a ManifestLock's spec.sourceRef is built (Kustomize, or its YAML files)")
	helm.add(f)
	f.StringVar(&name, "name", "", "name of the ManifestLock; defaults to the first file's name")
	f.StringVar(&lockNamespace, "lock-namespace", "cattle-helm-system", "namespace of the ManifestLock: the registration namespace may hold anything; any other, its own objects only")
	f.BoolVar(&prune, "prune", false, "delete objects this lock created that the files no longer declare")
	f.BoolVar(&warn, "warn", false, "report drift and never revert it")
	f.BoolVar(&prevent, "prevent", false, "also deny, at admission, a write that would drift a locked object")
	f.BoolVar(&waitLocked, "wait", true, "wait until the lock says Locked")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait")
	f.StringVarP(&output, "output", "o", "", "print the ManifestLock as yaml or json instead of a summary")
	return cmd
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// lockName derives a lock's name from a file or folder name: "app.yaml"
// locks as "app".
func lockName(file string) string {
	if file == "-" {
		return ""
	}
	base := strings.TrimSuffix(filepath.Base(filepath.Clean(file)), filepath.Ext(file))
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(base), "-"), "-")
}

// printLock writes the lock as output says: a summary of its status (for
// a lock read back, with one), or the whole object as YAML or JSON.
func printLock(w io.Writer, obj any, output string) error {
	switch output {
	case "yaml", "json":
		data, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return err
		}
		if output == "yaml" {
			if data, err = yaml.JSONToYAML(data); err != nil {
				return err
			}
		} else {
			data = append(data, '\n')
		}
		_, err = w.Write(data)
		return err
	}
	if ml, ok := obj.(*mlv1.ManifestLock); ok {
		printLockStatus(w, ml)
	}
	return nil
}

// waitForLock waits until the lock's status is of generation and says it
// holds its objects, or that it cannot.
func waitForLock(ctx context.Context, locks dynamic.ResourceInterface, name string, generation int64, timeout time.Duration) (*mlv1.ManifestLock, error) {
	var ml *mlv1.ManifestLock
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u, err := locks.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, err
		}
		ml = &mlv1.ManifestLock{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ml); err != nil {
			return false, err
		}
		if ml.Status.ObservedGeneration < generation {
			return false, nil
		}
		switch ml.Status.State {
		case mlv1.StateLocked, mlv1.StateWatching:
			return true, nil
		case mlv1.StateError:
			return false, fmt.Errorf("ManifestLock %s cannot hold its objects", name)
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		err = fmt.Errorf("ManifestLock %s is not locked after %s", name, timeout)
	}
	return ml, err
}

// printLockStatus writes the lock's state, counts and conditions.
func printLockStatus(w io.Writer, ml *mlv1.ManifestLock) {
	s := ml.Status
	fmt.Fprintf(w, "state: %s, %d objects held, %d created by the lock\n", s.State, s.LockedObjects, len(s.Inventory))
	for _, c := range s.Conditions {
		fmt.Fprintf(w, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, p := range s.NotLocked {
		fmt.Fprintf(w, "  not held: %s: %s %s\n", p.Object, p.Reason, p.Message)
	}
}

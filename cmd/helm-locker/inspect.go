package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/helm-locker/helm-locker/internal/storage"
)

// newInspectCommand decodes what Helm stores, for people who would
// otherwise pipe a Secret through base64 twice, gunzip and jq.
func newInspectCommand() *cobra.Command {
	var (
		client   clientFlags
		revision int
		output   string
	)
	cmd := &cobra.Command{
		Use:   "inspect release NAME",
		Short: "Decode a Helm release as Helm's Secret driver stores it",
		Long: `inspect decodes the release Secret of one revision of a Helm release (the
latest unless --revision says otherwise) and prints it: the whole release as
YAML or JSON, or its rendered manifest alone. It says which Helm wrote the
revision, as the release itself records it (Helm 4 stores an apply_method,
Helm 3 none): the locker reads and renders each revision as that Helm does.
The YAML starts with it as a comment; JSON and the manifest leave it to
standard error.`,
		Example: `  helm-locker inspect release web -n apps
  helm-locker inspect release web -n apps --revision 3 -o manifest`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 || args[0] != "release" {
				return fmt.Errorf(`want "inspect release NAME", got %q`, strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"yaml", "json", "manifest"}, output) {
				return usageError(cmd, fmt.Errorf("-o %s: want yaml, json or manifest", output))
			}
			cfg, namespace, err := client.load()
			if err != nil {
				return err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			secret, err := releaseSecret(cmd, kube, namespace, args[1], revision)
			if err != nil {
				return err
			}
			rel, err := storage.Read(secret, namespace, args[1])
			if err != nil {
				return err
			}
			raw, err := storage.DecodeJSON(secret.Data["release"])
			if err != nil {
				return fmt.Errorf("Secret %s/%s: %w", secret.Namespace, secret.Name, err)
			}
			writtenBy := writtenBy(rel)
			if output == "yaml" {
				fmt.Fprintf(cmd.OutOrStdout(), "# %s\n", writtenBy)
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), writtenBy)
			}
			return printRelease(cmd.OutOrStdout(), raw, output)
		},
	}
	client.add(cmd)
	cmd.Flags().IntVar(&revision, "revision", 0, "revision to decode; 0 is the latest")
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "yaml, json, or manifest (the rendered manifest alone)")
	return cmd
}

// releaseSecret finds the Secret of one revision of a release, the latest
// for revision 0.
func releaseSecret(cmd *cobra.Command, kube kubernetes.Interface, namespace, name string, revision int) (*corev1.Secret, error) {
	secrets, err := releaseSecrets(cmd.Context(), kube, namespace, name)
	if err != nil {
		return nil, err
	}
	var revisions []string
	for _, s := range secrets {
		if v, ok := storage.Revision(s); ok {
			if v == revision {
				return s, nil
			}
			revisions = append(revisions, strconv.Itoa(v))
		}
	}
	if revision != 0 {
		slices.Sort(revisions)
		return nil, fmt.Errorf("release %s/%s has no revision %d; it has %s", namespace, name, revision, strings.Join(revisions, ", "))
	}
	latest, ok := storage.Latest(secrets)
	if !ok {
		return nil, fmt.Errorf("release %s/%s: no Secret labelled %s has a %s label and the name Helm gives that revision", namespace, name, storage.Selector(name), storage.LabelVersion)
	}
	return latest, nil
}

// releaseSecrets lists the Secrets of every stored revision of a release;
// a release with none is not found.
func releaseSecrets(ctx context.Context, kube kubernetes.Interface, namespace, name string) ([]*corev1.Secret, error) {
	list, err := kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: storage.Selector(name)})
	if err != nil {
		return nil, fmt.Errorf("listing the revisions of release %s/%s: %w", namespace, name, err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("release %s/%s not found: no Secret in %s is labelled %s", namespace, name, namespace, storage.Selector(name))
	}
	secrets := make([]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		secrets[i] = &list.Items[i]
	}
	return secrets, nil
}

// writtenBy says which Helm wrote a revision, and how it applied it.
func writtenBy(rel *storage.Release) string {
	how := "no apply_method: client-side apply"
	if rel.ApplyMethod != "" {
		how = fmt.Sprintf("apply_method %q", rel.ApplyMethod)
	}
	return fmt.Sprintf("release %s/%s revision %d: written by %v (%s)", rel.Namespace, rel.Name, rel.Version, rel.Helm(), how)
}

// printRelease writes a decoded release as output says.
func printRelease(w io.Writer, raw []byte, output string) error {
	switch output {
	case "json":
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	case "manifest":
		var rel struct {
			Manifest string `json:"manifest"`
		}
		if err := json.Unmarshal(raw, &rel); err != nil {
			return err
		}
		// As helm get manifest prints it.
		_, err := fmt.Fprintln(w, rel.Manifest)
		return err
	default:
		out, err := yaml.JSONToYAML(raw)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
}

package declare

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

func object(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	return u
}

func TestIgnore(t *testing.T) {
	web := object("apps/v1", "Deployment", "apps", "web")
	tests := []struct {
		name  string
		rules []v1alpha1.IgnoreRule
		want  []string
		err   string
	}{
		{name: "every object", rules: []v1alpha1.IgnoreRule{{Paths: []string{"/spec/replicas"}}}, want: []string{"/spec/replicas"}},
		{name: "by kind and group", rules: []v1alpha1.IgnoreRule{
			{Paths: []string{"/a"}, Target: &v1alpha1.IgnoreTarget{Group: "apps", Kind: "Deployment"}},
			{Paths: []string{"/b"}, Target: &v1alpha1.IgnoreTarget{Kind: "StatefulSet"}},
		}, want: []string{"/a"}},
		{name: "name is anchored", rules: []v1alpha1.IgnoreRule{
			{Paths: []string{"/a"}, Target: &v1alpha1.IgnoreTarget{Name: "we"}},
			{Paths: []string{"/b"}, Target: &v1alpha1.IgnoreTarget{Name: "w.*", Namespace: "app(s)?"}},
		}, want: []string{"/b"}},
		{name: "no rules", rules: nil, want: nil},
		{name: "no paths", rules: []v1alpha1.IgnoreRule{{}}, err: "spec.ignore[0].paths: at least one JSON pointer is required"},
		{name: "bad pointer", rules: []v1alpha1.IgnoreRule{{Paths: []string{"/a", "b"}}}, err: "spec.ignore[0].paths[1]"},
		{name: "bad pattern", rules: []v1alpha1.IgnoreRule{{Paths: []string{"/a"}, Target: &v1alpha1.IgnoreTarget{Namespace: "("}}}, err: "spec.ignore[0].target.namespace: invalid regular expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Ignore(tt.rules)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Ignore error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			if f != nil {
				for _, p := range f(web) {
					got = append(got, p.String())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ignored (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitOptedOut(t *testing.T) {
	kept := object("v1", "ConfigMap", "", "kept")
	optedOut := object("v1", "ConfigMap", "apps", "free")
	optedOut.SetAnnotations(map[string]string{v1alpha1.UnlockAnnotation: "false"})
	generated := object("batch/v1", "Job", "", "")
	generated.SetGenerateName("migrate-")
	got, problems := SplitOptedOut([]*unstructured.Unstructured{kept, optedOut, generated})
	if len(got) != 1 || got[0] != kept {
		t.Errorf("kept %v; want the first object alone", got)
	}
	var reasons []string
	for _, p := range problems {
		reasons = append(reasons, p.Object+": "+p.Reason)
	}
	if diff := cmp.Diff([]string{"ConfigMap apps/free: OptedOut", "Job migrate-*: GenerateName"}, reasons); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

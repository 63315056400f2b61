package api

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestDeployedCRDIsEmbeddedCRD fails when deploy/chart/helm-locker/crds drifts from the CRD
// the operator installs.
func TestDeployedCRDIsEmbeddedCRD(t *testing.T) {
	deployed, err := os.ReadFile("../deploy/chart/helm-locker/crds/helm.cattle.io_helmreleases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(deployed, crdYAML) {
		t.Error("deploy/chart/helm-locker/crds/helm.cattle.io_helmreleases.yaml differs from api/helm.cattle.io_helmreleases.yaml; run `make crd`")
	}
}

func TestCRDIdentity(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, string(crd.Spec.Scope), crd.Spec.Versions[0].Name}
	want := []string{v1alpha1.Resource.Resource + "." + v1alpha1.Group, v1alpha1.Group, v1alpha1.Kind, v1alpha1.Resource.Resource, "Namespaced", v1alpha1.Version}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD identity (-want +got):\n%s", diff)
	}
	if crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Error("CRD has no status subresource")
	}
	// kubectl get prints rancher/helm-locker's columns; -o wide adds
	// the mode and the rerender policy with its last finding.
	var columns, wide []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Release Name", "Release Namespace", "Version", "State", "Age"}, columns); diff != "" {
		t.Errorf("printer columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Mode", "Rerender", "Rendered"}, wide); diff != "" {
		t.Errorf("wide printer columns (-want +got):\n%s", diff)
	}
}

// TestCRDSchemaMatchesGoTypes walks the Go types and the CRD's schema
// together and fails on any field one has and the other lacks, or whose
// types disagree.
func TestCRDSchemaMatchesGoTypes(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	typ := reflect.TypeOf(v1alpha1.HelmRelease{})
	for _, name := range []string{"spec", "status"} {
		field, ok := fieldByJSONName(typ, name)
		if !ok {
			t.Fatalf("HelmRelease has no field %q", name)
		}
		compareSchema(t, "."+name, field.Type, root.Properties[name])
	}
	for _, enum := range root.Properties["status"].Properties["state"].Enum {
		found := false
		for _, s := range []v1alpha1.State{v1alpha1.StateDeployed, v1alpha1.StateTransitioning, v1alpha1.StateFailed, v1alpha1.StateUninstalled, v1alpha1.StateSecretNotFound, v1alpha1.StateError, v1alpha1.StateUnknown, v1alpha1.StateSuspended} {
			if string(enum.Raw) == `"`+string(s)+`"` {
				found = true
			}
		}
		if !found {
			t.Errorf("schema state enum value %s is not a v1alpha1.State", enum.Raw)
		}
	}
	spec := root.Properties["spec"].Properties["release"]
	if diff := cmp.Diff([]string{"name", "namespace"}, spec.Required); diff != "" {
		t.Errorf("spec.release required fields (-want +got):\n%s", diff)
	}
	for _, f := range []string{"name", "namespace"} {
		if min := spec.Properties[f].MinLength; min == nil || *min != 1 {
			t.Errorf("spec.release.%s accepts the empty string", f)
		}
	}
}

func compareSchema(t *testing.T, path string, typ reflect.Type, schema apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{
		reflect.String: "string", reflect.Int: "integer", reflect.Int32: "integer", reflect.Int64: "integer",
		reflect.Bool: "boolean", reflect.Struct: "object", reflect.Slice: "array", reflect.Map: "object",
	}[typ.Kind()]
	if typ == reflect.TypeOf(metav1.Time{}) {
		want = "string"
	}
	if schema.Type != want {
		t.Errorf("%s: schema type %q, Go type %s wants %q", path, schema.Type, typ, want)
		return
	}
	switch {
	case typ.Kind() == reflect.Slice:
		compareSchema(t, path+"[]", typ.Elem(), *schema.Items.Schema)
	case typ.Kind() == reflect.Struct && want == "object":
		goFields := jsonFields(typ)
		var names []string
		for name := range goFields {
			names = append(names, name)
		}
		for name := range schema.Properties {
			if _, ok := goFields[name]; !ok {
				t.Errorf("%s.%s is in the CRD schema but not in the Go type %s", path, name, typ)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			prop, ok := schema.Properties[name]
			if !ok {
				t.Errorf("%s.%s is in the Go type %s but not in the CRD schema", path, name, typ)
				continue
			}
			compareSchema(t, path+"."+name, goFields[name], prop)
		}
	}
}

func fieldByJSONName(typ reflect.Type, name string) (reflect.StructField, bool) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		if strings.Split(f.Tag.Get("json"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// TestCRDRejectsInvalidReleaseKeys holds the schema's patterns to the names
// Kubernetes and Helm accept, so a typo is refused at admission rather than
// reported later as a missing release.
func TestCRDRejectsInvalidReleaseKeys(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	release := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["release"]
	for _, tc := range []struct {
		field, value string
		valid        bool
	}{
		{"namespace", "apps", true},
		{"namespace", "kube-system", true},
		{"namespace", "Not_A-Valid.NS!", false},
		{"namespace", "with.dot", false},
		{"namespace", strings.Repeat("a", 64), false},
		{"name", "my-app", true},
		{"name", "my.app-2", true},
		{"name", "My_App", false},
		{"name", "-leading", false},
		{"name", strings.Repeat("a", 54), false},
	} {
		s := release.Properties[tc.field]
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			t.Fatalf("spec.release.%s pattern: %v", tc.field, err)
		}
		valid := re.MatchString(tc.value) && (s.MaxLength == nil || int64(len(tc.value)) <= *s.MaxLength)
		if valid != tc.valid {
			t.Errorf("spec.release.%s %q: valid = %v, want %v", tc.field, tc.value, valid, tc.valid)
		}
	}
}

// TestManifestLockCRD holds the ManifestLock CRD to its Go types, its
// deployed copy and its identity.
func TestManifestLockCRD(t *testing.T) {
	deployed, err := os.ReadFile("../deploy/chart/helm-locker/crds/helm-locker.io_manifestlocks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(deployed, manifestLockCRDYAML) {
		t.Error("deploy/chart/helm-locker/crds/helm-locker.io_manifestlocks.yaml differs from api/helm-locker.io_manifestlocks.yaml; run `make crd`")
	}
	crd, err := ManifestLockCRD()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, string(crd.Spec.Scope), crd.Spec.Versions[0].Name}
	want := []string{mlv1.Resource.Resource + "." + mlv1.Group, mlv1.Group, mlv1.Kind, mlv1.Resource.Resource, "Namespaced", mlv1.Version}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD identity (-want +got):\n%s", diff)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("CRD has no status subresource")
	}
	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		columns = append(columns, c.Name)
	}
	if diff := cmp.Diff([]string{"State", "Objects", "Drifts", "Revision", "Prune", "Mode", "Age"}, columns); diff != "" {
		t.Errorf("printer columns (-want +got):\n%s", diff)
	}
	root := v.Schema.OpenAPIV3Schema
	typ := reflect.TypeOf(mlv1.ManifestLock{})
	for _, name := range []string{"spec", "status"} {
		field, ok := fieldByJSONName(typ, name)
		if !ok {
			t.Fatalf("ManifestLock has no field %q", name)
		}
		compareSchema(t, "."+name, field.Type, root.Properties[name])
	}
	var enum []string
	for _, e := range root.Properties["status"].Properties["state"].Enum {
		enum = append(enum, string(e.Raw))
	}
	states := []string{`"Locked"`, `"Watching"`, `"Reconciling"`, `"Suspended"`, `"Error"`}
	for _, s := range []mlv1.State{mlv1.StateLocked, mlv1.StateWatching, mlv1.StateReconciling, mlv1.StateSuspended, mlv1.StateError} {
		if !slices.Contains(enum, `"`+string(s)+`"`) {
			t.Errorf("state %s is not in the schema's enum %v", s, enum)
		}
	}
	if len(enum) != len(states) {
		t.Errorf("schema state enum %v, want %v", enum, states)
	}
}

// jsonFields maps the JSON names of typ's fields to their types, with the
// fields of inlined structs as the JSON encoder flattens them.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		switch {
		case name == "" && f.Anonymous:
			for n, t := range jsonFields(f.Type) {
				out[n] = t
			}
		case name != "" && name != "-":
			out[name] = f.Type
		}
	}
	return out
}

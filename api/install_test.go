package api

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// TestInstallCRDsRaces installs the CRDs while another replica, starting
// at the same moment, creates or updates them first: the install reads
// again and succeeds, as long as the race is not lost every time.
func TestInstallCRDsRaces(t *testing.T) {
	crdResource := schema.GroupResource{Group: apiextensionsv1.GroupName, Resource: "customresourcedefinitions"}
	established := func(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
		crd = crd.DeepCopy()
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		return crd
	}
	want, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		installed bool // the CRDs exist before the install
		// lose says whether the install loses the race on its nth
		// write of this verb (from 1).
		lose    func(verb string, n int) bool
		wantErr string
	}{
		{name: "another replica creates first", lose: func(verb string, n int) bool { return verb == "create" && n == 1 }},
		{name: "another replica updates first", installed: true, lose: func(verb string, n int) bool { return verb == "update" && n == 1 }},
		{name: "no race", installed: true, lose: func(string, int) bool { return false }},
		{name: "every update loses", installed: true, lose: func(verb string, _ int) bool { return verb == "update" },
			wantErr: "updating CRD " + want.Name},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.installed {
				for _, get := range []func() (*apiextensionsv1.CustomResourceDefinition, error){CRD, ManifestLockCRD} {
					crd, _ := get()
					if err := client.Tracker().Add(established(crd)); err != nil {
						t.Fatal(err)
					}
				}
			}
			writes := map[string]int{}
			client.PrependReactor("*", "customresourcedefinitions", func(a k8stesting.Action) (bool, runtime.Object, error) {
				verb := a.GetVerb()
				if verb != "create" && verb != "update" {
					return false, nil, nil
				}
				writes[verb]++
				if !tt.lose(verb, writes[verb]) {
					if verb == "create" {
						// The API server establishes what it creates.
						crd := a.(k8stesting.CreateAction).GetObject().(*apiextensionsv1.CustomResourceDefinition)
						return true, established(crd), client.Tracker().Add(established(crd))
					}
					return false, nil, nil
				}
				name := a.(interface{ GetObject() runtime.Object }).GetObject().(*apiextensionsv1.CustomResourceDefinition).Name
				if verb == "create" {
					// The other replica's create landed first.
					crd, _ := CRD()
					if name != crd.Name {
						crd, _ = ManifestLockCRD()
					}
					if err := client.Tracker().Add(established(crd)); err != nil {
						t.Fatal(err)
					}
					return true, nil, apierrors.NewAlreadyExists(crdResource, name)
				}
				return true, nil, apierrors.NewConflict(crdResource, name, nil)
			})
			err := InstallCRDs(context.Background(), client)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("InstallCRDs: %v", err)
				}
				for _, name := range []string{want.Name, "manifestlocks.helm-locker.io"} {
					if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{}); err != nil {
						t.Errorf("CRD %s after the install: %v", name, err)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !apierrors.IsConflict(err) {
				t.Fatalf("InstallCRDs = %v, want a conflict naming %q", err, tt.wantErr)
			}
		})
	}
}

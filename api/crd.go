package api

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

//go:embed helm.cattle.io_helmreleases.yaml
var crdYAML []byte

//go:embed helm-locker.io_manifestlocks.yaml
var manifestLockCRDYAML []byte

// CRD returns the HelmRelease CustomResourceDefinition.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	return decodeCRD("HelmRelease", crdYAML)
}

// ManifestLockCRD returns the ManifestLock CustomResourceDefinition.
func ManifestLockCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	return decodeCRD("ManifestLock", manifestLockCRDYAML)
}

func decodeCRD(kind string, data []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("decoding the embedded %s CRD: %w", kind, err)
	}
	return crd, nil
}

// InstallCRDs creates the HelmRelease and ManifestLock CRDs, or updates
// them to this version's schemas, and waits until the API server serves
// them.
func InstallCRDs(ctx context.Context, client apiextensionsclient.Interface) error {
	for _, get := range []func() (*apiextensionsv1.CustomResourceDefinition, error){CRD, ManifestLockCRD} {
		want, err := get()
		if err != nil {
			return err
		}
		if err := installCRD(ctx, client, want); err != nil {
			return err
		}
	}
	return nil
}

// CheckCRDs is InstallCRDs for a locker that may not write CRDs, because
// something else (the Helm chart's crds/) installs them: it fails unless
// both are established, and returns the names of those whose schema is
// not this version's, which then prunes the fields the schema lacks.
func CheckCRDs(ctx context.Context, client apiextensionsclient.Interface) (stale []string, err error) {
	for _, get := range []func() (*apiextensionsv1.CustomResourceDefinition, error){CRD, ManifestLockCRD} {
		want, err := get()
		if err != nil {
			return nil, err
		}
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("CRD %s is not installed: apply the chart's crds/ (kubectl apply --server-side -f deploy/chart/helm-locker/crds), or run with --install-crds", want.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", want.Name, err)
		}
		if !established(got) {
			return nil, fmt.Errorf("CRD %s is not established", want.Name)
		}
		if !sameSchemas(got, want) {
			stale = append(stale, want.Name)
		}
	}
	return stale, nil
}

// sameSchemas reports whether got serves want's versions with want's
// schemas.
func sameSchemas(got, want *apiextensionsv1.CustomResourceDefinition) bool {
	if len(got.Spec.Versions) != len(want.Spec.Versions) {
		return false
	}
	for i, v := range want.Spec.Versions {
		g := got.Spec.Versions[i]
		if g.Name != v.Name || g.Served != v.Served || g.Schema == nil || v.Schema == nil ||
			!equality.Semantic.DeepEqual(g.Schema.OpenAPIV3Schema, v.Schema.OpenAPIV3Schema) {
			return false
		}
	}
	return true
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// installCRD creates or updates want. Replicas and shards starting
// together all install the CRDs: whoever loses the race to create gets
// AlreadyExists, whoever updates from a stale read gets a Conflict, and
// both read again and update, which leaves the CRD as it was when the
// winner wrote the same spec. Exiting instead would leave a replica down
// until the kubelet's back-off lets it start again.
func installCRD(ctx context.Context, client apiextensionsclient.Interface, want *apiextensionsv1.CustomResourceDefinition) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	raced := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, raced, func() error {
		got, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := crds.Create(ctx, want, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating CRD %s: %w", want.Name, err)
			}
		case err != nil:
			return fmt.Errorf("reading CRD %s: %w", want.Name, err)
		default:
			got.Spec = want.Spec
			if _, err := crds.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating CRD %s: %w", want.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
		return err == nil && established(crd), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", want.Name, err)
	}
	return nil
}

package e2e

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// createManifestLock creates a ManifestLock with spec and returns its name.
func createManifestLock(t *testing.T, namespace, name string, spec map[string]any) {
	t.Helper()
	ml := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}}
	if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(namespace).Create(t.Context(), ml, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ManifestLock %s/%s: %v", namespace, name, err)
	}
}

func getManifestLock(t *testing.T, namespace, name string) *mlv1.ManifestLock {
	t.Helper()
	u, err := env.Dynamic.Resource(mlv1.Resource).Namespace(namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ml := &mlv1.ManifestLock{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ml); err != nil {
		t.Fatal(err)
	}
	return ml
}

// waitManifestLock waits until the lock's status says state for its
// current generation, and returns it.
func waitManifestLock(t *testing.T, namespace, name string, state mlv1.State) *mlv1.ManifestLock {
	t.Helper()
	var ml *mlv1.ManifestLock
	env.Eventually(t, 30*time.Second, func() error {
		ml = getManifestLock(t, namespace, name)
		if ml.Status.State != state || ml.Status.ObservedGeneration != ml.Generation {
			return fmt.Errorf("ManifestLock %s/%s: state %q at generation %d of %d, want %s; conditions %+v",
				namespace, name, ml.Status.State, ml.Status.ObservedGeneration, ml.Generation, state, ml.Status.Conditions)
		}
		return nil
	})
	return ml
}

func configMapYAML(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  key: %s\n", name, value)
}

func inventoryNames(ml *mlv1.ManifestLock) []string {
	var out []string
	for _, r := range ml.Status.Inventory {
		out = append(out, r.Kind+"/"+r.Name)
	}
	slices.Sort(out)
	return out
}

// TestManifestLockInline applies an inline manifest, holds it against an
// edit and a delete, and lists what it created.
func TestManifestLockInline(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	role := ns + "-reader"
	manifest := configMapYAML("a", "declared") + "---\n" + configMapYAML("b", "declared") + fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %s
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, role)
	name := "inline-" + ns
	createManifestLock(t, framework.RegistrationNamespace, name, map[string]any{"manifest": manifest, "namespace": ns})
	ml := waitManifestLock(t, framework.RegistrationNamespace, name, mlv1.StateLocked)
	if c := findCondition(&v1alpha1.HelmRelease{Status: v1alpha1.HelmReleaseStatus{LockStatus: ml.Status.LockStatus}}, v1alpha1.ConditionLocked); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Locked condition %+v", c)
	}
	if got, want := inventoryNames(ml), []string{"ClusterRole/" + role, "ConfigMap/a", "ConfigMap/b"}; !slices.Equal(got, want) {
		t.Errorf("inventory %v, want %v", got, want)
	}
	if ml.Status.LockedObjects != 3 || ml.Status.DriftsDetected != 0 {
		t.Errorf("status: %d objects locked, %d drifts; want 3 and none (the first apply is no drift)", ml.Status.LockedObjects, ml.Status.DriftsDetected)
	}

	setKey(t, ns, "a", "edited")
	waitKey(t, ns, "a", "declared")
	if err := env.Kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKey(t, ns, "b", "declared")
	env.Eventually(t, 10*time.Second, func() error {
		ml := getManifestLock(t, framework.RegistrationNamespace, name)
		if ml.Status.DriftsCorrected != 2 || ml.Status.LastDrift == nil || !ml.Status.LastDrift.Deleted {
			return fmt.Errorf("status counts %d corrected drifts, last %+v; want 2, the last a deletion", ml.Status.DriftsCorrected, ml.Status.LastDrift)
		}
		return nil
	})

	// Each drift is an event on the lock, naming its author; the
	// first apply is none.
	env.Eventually(t, 10*time.Second, func() error {
		var corrected []string
		for _, e := range env.Events(t, framework.RegistrationNamespace, name) {
			if e.InvolvedObject.Kind == mlv1.Kind && e.Reason == "DriftCorrected" {
				corrected = append(corrected, e.Message)
			}
		}
		if len(corrected) != 2 || !strings.Contains(strings.Join(corrected, "\n"), "kubectl-edit") {
			return fmt.Errorf("DriftCorrected events on the lock: %q; want the edit (by kubectl-edit) and the deletion", corrected)
		}
		return nil
	})

	// Suspended, the lock opens; resumed, it reverts what drifted.
	suspend := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"suspend":%v}}`, on)
		if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	suspend(true)
	waitManifestLock(t, framework.RegistrationNamespace, name, mlv1.StateSuspended)
	editStays(t, ns, "a", "while-suspended", "the lock is suspended")
	suspend(false)
	waitKey(t, ns, "a", "declared")
	waitManifestLock(t, framework.RegistrationNamespace, name, mlv1.StateLocked)
	// The manifest is the one held before: the edit is someone else's,
	// and counts as a drift.
	env.Eventually(t, 10*time.Second, func() error {
		if ml := getManifestLock(t, framework.RegistrationNamespace, name); ml.Status.DriftsCorrected != 3 {
			return fmt.Errorf("status counts %d corrected drifts after the lock resumed; want 3, the edit made while suspended among them", ml.Status.DriftsCorrected)
		}
		return nil
	})

	// Deleting the lock deletes nothing.
	if err := env.Dynamic.Resource(mlv1.Resource).Namespace(framework.RegistrationNamespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	editStaysOnceLetGo(t, ns, "a", "free", "the lock is gone")
	if env.Get(t, "rbac.authorization.k8s.io/v1", "clusterroles", "", role) == nil {
		t.Error("deleting the ManifestLock deleted its ClusterRole")
	}
}

// TestManifestLockFromConfigMapPrunes reads the manifest from a ConfigMap,
// follows its changes, and prunes only what it created.
func TestManifestLockFromConfigMapPrunes(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	// adopted exists before the lock: never pruned.
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "adopted"}, Data: map[string]string{"key": "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	source := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-manifest"}, Data: map[string]string{
		"app.yaml": configMapYAML("adopted", "declared") + "---\n" + configMapYAML("created", "declared") + "---\n" + configMapYAML("dropped", "declared"),
	}}
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Create(t.Context(), source, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A lock in the tenant's own namespace writes as its default
	// ServiceAccount, which may edit ConfigMaps there, and lets it.
	grantConfigMaps(t, ns, "default")
	optIn(t, ns, "default", "app")
	createManifestLock(t, ns, "app", map[string]any{"manifestFrom": map[string]any{"configMapRef": map[string]any{"name": "app-manifest", "key": "app.yaml"}}, "prune": true})
	ml := waitManifestLock(t, ns, "app", mlv1.StateLocked)
	if got, want := inventoryNames(ml), []string{"ConfigMap/created", "ConfigMap/dropped"}; !slices.Equal(got, want) {
		t.Errorf("inventory %v, want %v: adopted existed before", got, want)
	}
	waitKey(t, ns, "adopted", "declared")

	// A new manifest in the ConfigMap drops two objects: the one the lock
	// created is pruned, the adopted one stays.
	source.Data["app.yaml"] = configMapYAML("created", "updated")
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Update(t.Context(), source, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKey(t, ns, "created", "updated")
	env.Eventually(t, 10*time.Second, func() error {
		if _, ok := keyOf(t, ns, "dropped"); ok {
			return errors.New("ConfigMap dropped was not pruned")
		}
		return nil
	})
	if v, ok := keyOf(t, ns, "adopted"); !ok || v != "declared" {
		t.Errorf("the adopted ConfigMap has key %q (exists %v); pruning must leave it", v, ok)
	}
	// The status that says so is written after the delete: a read
	// between the two still shows the inventory before it.
	env.Eventually(t, 10*time.Second, func() error {
		ml := getManifestLock(t, ns, "app")
		if got, want := inventoryNames(ml), []string{"ConfigMap/created"}; ml.Status.State != mlv1.StateLocked || !slices.Equal(got, want) {
			return fmt.Errorf("ManifestLock %s/app is %s with inventory %v after pruning, want Locked with %v", ns, ml.Status.State, got, want)
		}
		return nil
	})
}

// TestManifestLockTenantEscalation: a lock outside the registration
// namespace naming a cluster-scoped object, or another namespace's, is
// refused as a whole, and nothing of it is written.
func TestManifestLockTenantEscalation(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	other := env.Namespace(t)
	grantConfigMaps(t, ns, "default")
	// The writer opted in: the refusal is for what the lock names.
	optIn(t, ns, "default", "escalate")
	binding := ns + "-admin"
	manifest := configMapYAML("innocent", "x") + fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {kind: ServiceAccount, name: default, namespace: %s}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: elsewhere
  namespace: %s
data:
  key: x
`, binding, ns, other)
	createManifestLock(t, ns, "escalate", map[string]any{"manifest": manifest})
	ml := waitManifestLock(t, ns, "escalate", mlv1.StateError)
	var ready *metav1.Condition
	for i, c := range ml.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			ready = &ml.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Reason != "Forbidden" || !strings.Contains(ready.Message, "ClusterRoleBinding "+binding+" (cluster-scoped)") ||
		!strings.Contains(ready.Message, "ConfigMap "+other+"/elsewhere (another namespace)") {
		t.Errorf("Ready condition %+v; want Forbidden naming the ClusterRoleBinding and the other namespace", ready)
	}
	env.Consistently(t, time.Second, func() error {
		if env.Get(t, "rbac.authorization.k8s.io/v1", "clusterrolebindings", "", binding) != nil {
			return errors.New("the tenant's ClusterRoleBinding was created")
		}
		if _, ok := keyOf(t, ns, "innocent"); ok {
			return errors.New("a refused lock wrote its namespaced object")
		}
		if _, ok := keyOf(t, other, "elsewhere"); ok {
			return errors.New("a refused lock wrote into another namespace")
		}
		return nil
	})
}

// grantConfigMaps lets ServiceAccount sa of ns write ConfigMaps in ns.
func grantConfigMaps(t *testing.T, ns, sa string) {
	t.Helper()
	env.Kubectl(t, "create", "role", "configmaps", "-n", ns, "--verb=get,list,watch,create,update,patch,delete", "--resource=configmaps")
	env.Kubectl(t, "create", "rolebinding", "configmaps", "-n", ns, "--role=configmaps", "--serviceaccount="+ns+":"+sa)
}

// waitKey waits until ConfigMap ns/name has data.key value.
func waitKey(t *testing.T, ns, name, value string) {
	t.Helper()
	env.Eventually(t, 10*time.Second, func() error {
		if got, _ := keyOf(t, ns, name); got != value {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q, want %q", ns, name, got, value)
		}
		return nil
	})
}

// TestManifestLockFromSecret reads the manifest from a Secret's key and
// follows its changes.
func TestManifestLockFromSecret(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	grantConfigMaps(t, ns, "default")
	optIn(t, ns, "default", "app")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-manifest"}, Data: map[string][]byte{"app.yaml": []byte(configMapYAML("from-secret", "one"))}}
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createManifestLock(t, ns, "app", map[string]any{"manifestFrom": map[string]any{"secretRef": map[string]any{"name": "app-manifest", "key": "app.yaml"}}})
	waitManifestLock(t, ns, "app", mlv1.StateLocked)
	waitKey(t, ns, "from-secret", "one")
	secret.Data["app.yaml"] = []byte(configMapYAML("from-secret", "two"))
	if _, err := env.Kube.CoreV1().Secrets(ns).Update(t.Context(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKey(t, ns, "from-secret", "two")

	// A source that goes away leaves the objects held, and says so.
	if err := env.Kube.CoreV1().Secrets(ns).Delete(t.Context(), "app-manifest", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ml := waitManifestLock(t, ns, "app", mlv1.StateError)
	for _, c := range ml.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady && (c.Reason != "ManifestUnavailable" || !strings.Contains(c.Message, "stay held")) {
			t.Errorf("Ready condition %+v; want ManifestUnavailable, the objects still held", c)
		}
	}
	setKey(t, ns, "from-secret", "edited")
	waitKey(t, ns, "from-secret", "two")
}

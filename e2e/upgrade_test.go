package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/release"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/internal/upgrade"
)

// The two-way chart copies data.greeting of the ConfigMap "settings" in
// the release namespace into its own ConfigMap, <release>-two-way.
const (
	upgradeRelease   = "app"
	upgradeConfigMap = upgradeRelease + "-two-way"
)

// TestUpgradeThroughSDK installs the two-way chart with each helm
// CLI, changes the ConfigMap its `lookup` reads, and upgrades the release
// with upgrade.Upgrade as a ServiceAccount bound to the ClusterRole edit:
// revision 2 is deployed and 1 superseded, the ConfigMap takes the new
// value and is owned by manager "helm" alone (with Helm 4, through an
// Apply entry, and revision 2 keeps apply_method "ssa"), and a `helm
// upgrade` with the same CLI afterwards succeeds without --force. An
// identity that may not write Secrets gets Forbidden, and so does one
// that may not read what the chart looks up: the render's `lookup` is the
// identity's too. Either way the release stays at revision 1, deployed.
// An upgrade that fails after Helm stored revision 2 is rolled back to 1
// as revision 3 (testUpgradeRollsBackForbidden, testUpgradeRollsBackDenied).
func TestUpgradeThroughSDK(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			testUpgradeThroughSDK(t, v)
		})
		t.Run(v.String()+"-no-secret-writes", func(t *testing.T) {
			t.Parallel()
			testUpgradeWithoutSecretWrites(t, v)
		})
		t.Run(v.String()+"-lookup-as-identity", func(t *testing.T) {
			t.Parallel()
			testUpgradeLooksUpAsIdentity(t, v)
		})
		t.Run(v.String()+"-rolls-back-forbidden", func(t *testing.T) {
			t.Parallel()
			testUpgradeRollsBackForbidden(t, v)
		})
		t.Run(v.String()+"-rolls-back-denied", func(t *testing.T) {
			t.Parallel()
			testUpgradeRollsBackDenied(t, v)
		})
	}
}

func testUpgradeThroughSDK(t *testing.T, v framework.HelmVersion) {
	ns, chart := installTwoWay(t, v, "eu-west-1")
	// edit (aggregated from system:aggregate-to-edit) already allows
	// every write on Secrets, the release Secrets included: no Role of
	// our own is needed.
	cfg := writeIdentity(t, ns, "release-writer", rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"})
	waitAllowed(t, ns, "release-writer", "secrets", "create", "update", "delete")

	setGreeting(t, ns, "us-east-2")
	start := time.Now()
	next, err := upgrade.Upgrade(t.Context(), cfg, latestRelease(t, ns), upgrade.DefaultOptions())
	if err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	t.Logf("Upgrade took %s", time.Since(start).Round(time.Millisecond))
	if next.Version != 2 || next.Info.Status != release.StatusDeployed {
		t.Errorf("Upgrade returned revision %d %s, want 2 deployed", next.Version, next.Info.Status)
	}
	if diff := cmp.Diff(map[int]string{1: "superseded", 2: "deployed"}, revisionStatuses(t, ns)); diff != "" {
		t.Errorf("revisions (-want +got):\n%s", diff)
	}
	if got := configMapData(t, ns, upgradeConfigMap, "greeting"); got != "us-east-2" {
		t.Errorf("data.greeting = %q after Upgrade, want the looked-up %q", got, "us-east-2")
	}
	// Helm 3 writes client-side (Update), Helm 4 applies server-side
	// (Apply); either way as "helm" alone: no "helm-locker", no binary
	// name such as "upgrade.test".
	operation := "Update"
	if v == framework.Helm4 {
		operation = "Apply"
	}
	want := []string{"helm/" + operation}
	if diff := cmp.Diff(want, fieldOwners(t, "configmaps", ns, upgradeConfigMap)); diff != "" {
		t.Errorf("managers of ConfigMap %s after Upgrade (-want +got):\n%s", upgradeConfigMap, diff)
	}
	// The release Secret is Helm's too: its storage driver names no
	// manager, and the API server takes it from the user agent.
	if diff := cmp.Diff([]string{"helm/Update"}, fieldOwners(t, "secrets", ns, storage.SecretName(upgradeRelease, 2))); diff != "" {
		t.Errorf("managers of revision 2's Secret (-want +got):\n%s", diff)
	}
	wantMethod := ""
	if v == framework.Helm4 {
		wantMethod = storage.ApplyMethodServerSide
	}
	// Helm 3's types would also drop revision 1's apply_method as they
	// mark it superseded.
	for revision := 1; revision <= 2; revision++ {
		if got := applyMethod(t, ns, revision); got != wantMethod {
			t.Errorf("revision %d apply_method = %q after Upgrade, want %q", revision, got, wantMethod)
		}
	}

	// The user's next upgrade, with the same CLI and no --force.
	// It looks up settings that do not exist, so the greeting is the
	// default it sets.
	env.Helm(t, v, "upgrade", upgradeRelease, chart, "-n", ns, "--set", "settings.name=missing,settings.defaultGreeting=hola")
	if diff := cmp.Diff(map[int]string{1: "superseded", 2: "superseded", 3: "deployed"}, revisionStatuses(t, ns)); diff != "" {
		t.Errorf("revisions after helm upgrade (-want +got):\n%s", diff)
	}
	if got := configMapData(t, ns, upgradeConfigMap, "greeting"); got != "hola" {
		t.Errorf("data.greeting = %q after helm upgrade --set settings.defaultGreeting=hola, want hola", got)
	}
	if got := applyMethod(t, ns, 3); got != wantMethod {
		t.Errorf("revision 3 (helm upgrade) apply_method = %q, want %q", got, wantMethod)
	}
	if diff := cmp.Diff(want, fieldOwners(t, "configmaps", ns, upgradeConfigMap)); diff != "" {
		t.Errorf("managers of ConfigMap %s after helm upgrade (-want +got):\n%s", upgradeConfigMap, diff)
	}
}

func testUpgradeWithoutSecretWrites(t *testing.T, v framework.HelmVersion) {
	ns, _ := installTwoWay(t, v, "eu-west-1")
	// What the release's objects need, and only reads of Secrets: edit
	// would allow writing them.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "no-secret-writes"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := writeIdentity(t, ns, "reader", rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name})
	waitAllowed(t, ns, "reader", "secrets", "list")

	setGreeting(t, ns, "us-east-2")
	_, err := upgrade.Upgrade(t.Context(), cfg, latestRelease(t, ns), upgrade.DefaultOptions())
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		t.Fatalf("Upgrade as an identity that may not write Secrets returned %v, want Forbidden", err)
	}
	t.Logf("Upgrade: %v (apierrors.IsForbidden: %t)", err, apierrors.IsForbidden(err))
	refusedUntouched(t, ns)
}

func testUpgradeLooksUpAsIdentity(t *testing.T, v framework.HelmVersion) {
	ns, _ := installTwoWay(t, v, "eu-west-1")
	// Everything the upgrade writes, but no read of the ConfigMap the
	// chart looks up, which the admin config the test started from
	// could read.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "no-settings"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{upgradeConfigMap}, Verbs: []string{"get", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := writeIdentity(t, ns, "no-settings", rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name})
	waitAllowed(t, ns, "no-settings", "secrets", "create")

	setGreeting(t, ns, "us-east-2")
	_, err := upgrade.Upgrade(t.Context(), cfg, latestRelease(t, ns), upgrade.DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), `configmaps "settings" is forbidden`) {
		t.Fatalf("Upgrade as an identity that may not read the looked-up ConfigMap returned %v, want Forbidden on it", err)
	}
	refusedUntouched(t, ns)
}

// refusedUntouched checks that a refused Upgrade left the release at
// revision 1, deployed, and its ConfigMap as installed.
func refusedUntouched(t *testing.T, ns string) {
	t.Helper()
	if diff := cmp.Diff(map[int]string{1: "deployed"}, revisionStatuses(t, ns)); diff != "" {
		t.Errorf("revisions after the refused Upgrade (-want +got):\n%s", diff)
	}
	if got := configMapData(t, ns, upgradeConfigMap, "greeting"); got != "eu-west-1" {
		t.Errorf("data.greeting = %q after the refused Upgrade, want it untouched: %q", got, "eu-west-1")
	}
}

// testUpgradeRollsBackForbidden upgrades as an identity RBAC lets
// store revision 2 but not write the ConfigMap, which must change. Helm 3
// rolls back: its rollback does not write the ConfigMap, whose three-way
// patch from revision 2's manifest to 1's is empty. Helm 4's applies every
// object of revision 1 server-side, and is refused the ConfigMap as the
// upgrade was: revision 3 is failed too.
func testUpgradeRollsBackForbidden(t *testing.T, v framework.HelmVersion) {
	ns, _ := installTwoWay(t, v, "eu-west-1")
	cfg := noConfigMapWrites(t, ns, "no-configmap-writes")
	waitAllowed(t, ns, "no-configmap-writes", "secrets", "create", "update")

	wantErr := "; rolled back to revision 1 as revision 3"
	wantStatuses := map[int]string{1: "superseded", 2: "failed", 3: "deployed"}
	if v == framework.Helm4 {
		wantErr = "; rolling back failed too: "
		wantStatuses = map[int]string{1: "deployed", 2: "superseded", 3: "failed"}
	}
	err := upgradeToFailure(t, ns, cfg, wantStatuses)
	if msg := err.Error(); !strings.Contains(msg, "forbidden") || !strings.Contains(msg, wantErr) {
		t.Errorf("Upgrade's error does not say forbidden and %q", wantErr)
	}
	if v == framework.Helm4 && strings.Count(err.Error(), `configmaps "app-two-way" is forbidden`) != 2 {
		t.Errorf("Upgrade's error does not give both the upgrade's and the rollback's Forbidden")
	}
}

// testUpgradeRollsBackDenied upgrades as an identity that may write
// everything the release holds, but whose writes of the new greeting an
// admission policy denies: both CLIs roll back, Helm 4 applying revision
// 1's objects server-side again.
func testUpgradeRollsBackDenied(t *testing.T, v framework.HelmVersion) {
	ns, _ := installTwoWay(t, v, "eu-west-1")
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"", "apps"}, Resources: []string{"secrets", "configmaps", "deployments"}, Verbs: []string{"*"}},
		},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := writeIdentity(t, ns, role.Name, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name})
	waitAllowed(t, ns, role.Name, "configmaps", "patch")
	denyGreeting(t, ns, cfg, "us-east-2")

	err := upgradeToFailure(t, ns, cfg, map[int]string{1: "superseded", 2: "failed", 3: "deployed"})
	if want := "; rolled back to revision 1 as revision 3"; !strings.Contains(err.Error(), "denied request") || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Upgrade's error does not give the denial and end with %q", want)
	}
	operation := "Update"
	if v == framework.Helm4 {
		operation = "Apply"
	}
	if diff := cmp.Diff([]string{"helm/" + operation}, fieldOwners(t, "configmaps", ns, upgradeConfigMap)); diff != "" {
		t.Errorf("managers of ConfigMap %s after the rollback (-want +got):\n%s", upgradeConfigMap, diff)
	}
}

// upgradeToFailure sets the looked-up greeting to us-east-2, so that the
// ConfigMap must change, and upgrades the release as cfg, which may not
// write the change. It returns Upgrade's error, checked to wrap a failure
// of revision 2, after checking the revisions' statuses against want,
// that the latest has revision 1's manifest and apply method, and that the
// ConfigMap is as revision 1 left it.
func upgradeToFailure(t *testing.T, ns string, cfg *rest.Config, want map[int]string) error {
	t.Helper()
	installed := latestRelease(t, ns)
	setGreeting(t, ns, "us-east-2")
	start := time.Now()
	_, err := upgrade.Upgrade(t.Context(), cfg, installed, upgrade.DefaultOptions())
	t.Logf("Upgrade took %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("Upgrade succeeded; want it to fail on the ConfigMap")
	}
	if diff := cmp.Diff(want, revisionStatuses(t, ns)); diff != "" {
		t.Errorf("revisions after the failed Upgrade (-want +got):\n%s", diff)
	}
	if got := latestRelease(t, ns); got.Version != 3 || got.Manifest != installed.Manifest {
		t.Errorf("latest revision %d, manifest (-revision 1 +latest):\n%s", got.Version, cmp.Diff(installed.Manifest, got.Manifest))
	}
	if got, want := applyMethod(t, ns, 3), applyMethod(t, ns, 1); got != want {
		t.Errorf("revision 3 (the rollback) apply_method = %q, revision 1's %q", got, want)
	}
	if got := configMapData(t, ns, upgradeConfigMap, "greeting"); got != "eu-west-1" {
		t.Errorf("data.greeting = %q after the failed Upgrade, want revision 1's %q", got, "eu-west-1")
	}
	return err
}

// denyGreeting makes the API server deny cfg's writes of ConfigMaps in ns
// whose data.greeting is greeting, through a ValidatingAdmissionPolicy,
// and waits until it does.
func denyGreeting(t *testing.T, ns string, cfg *rest.Config, greeting string) {
	t.Helper()
	name := ns + "-deny-greeting"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: new(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "identity", Expression: fmt.Sprintf("request.userInfo.username == %q", cfg.Impersonate.UserName)}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.data) || !('greeting' in object.data) || object.data.greeting != %q", greeting),
				Message:    "greeting " + greeting + " is not allowed",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			},
		},
	}
	policies := env.Kube.AdmissionregistrationV1()
	if _, err := policies.ValidatingAdmissionPolicies().Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = policies.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = policies.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := policies.ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	identity, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"data":{"greeting":%q}}`, greeting)
	env.Eventually(t, 30*time.Second, func() error {
		_, err := identity.CoreV1().ConfigMaps(ns).Patch(t.Context(), upgradeConfigMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "denied request") {
			return fmt.Errorf("a dry-run write of greeting %s as %s returned %v, want denied", greeting, cfg.Impersonate.UserName, err)
		}
		return nil
	})
}

// installTwoWay creates a namespace with the ConfigMap "settings"
// (data.greeting = greeting) and installs the two-way chart there as
// release "app" with CLI v. It returns the namespace and the chart's path.
func installTwoWay(t *testing.T, v framework.HelmVersion, greeting string) (ns, chart string) {
	t.Helper()
	ns = env.Namespace(t)
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": greeting}}
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Create(t.Context(), settings, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chart = framework.Chart(t, "two-way")
	env.Helm(t, v, "install", upgradeRelease, chart, "-n", ns)
	if got := configMapData(t, ns, upgradeConfigMap, "greeting"); got != greeting {
		t.Fatalf("data.greeting = %q after install, want the looked-up %q", got, greeting)
	}
	return ns, chart
}

// noConfigMapWrites creates ServiceAccount name in ns with a Role of its
// name that is enough for Helm to store an upgrade of the two-way chart
// and apply it: it reads the looked-up settings and its own ConfigMap,
// writes its Secrets and the Deployment, and fails on the one write left,
// the ConfigMap's. It returns the admin config impersonating the account.
func noConfigMapWrites(t *testing.T, ns, name string) *rest.Config {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
		},
	}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return writeIdentity(t, ns, name, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name})
}

// writeIdentity creates ServiceAccount name in ns, binds it to role in ns,
// and returns the admin config impersonating it: a release's write
// identity.
func writeIdentity(t *testing.T, ns, name string, role rbacv1.RoleRef) *rest.Config {
	t.Helper()
	if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    role,
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.CP.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccountUser(ns, name)}
	return cfg
}

func serviceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// waitAllowed waits until ServiceAccount name of ns may do each of verbs on
// resource in ns: RBAC's authorizer sees a new binding, and
// kube-controller-manager aggregates edit's rules, a moment later.
func waitAllowed(t *testing.T, ns, name, resource string, verbs ...string) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		for _, verb := range verbs {
			review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               serviceAccountUser(ns, name),
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !review.Status.Allowed {
				return fmt.Errorf("%s may not %s %s in %s", serviceAccountUser(ns, name), verb, resource, ns)
			}
		}
		return nil
	})
}

func configMapData(t *testing.T, ns, name, key string) string {
	t.Helper()
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[key]
}

// releaseSecrets returns the release's Secrets by revision.
func releaseSecrets(t *testing.T, ns string) map[int]*corev1.Secret {
	t.Helper()
	list, err := env.Kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: storage.Selector(upgradeRelease)})
	if err != nil {
		t.Fatal(err)
	}
	secrets := make(map[int]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		s := &list.Items[i]
		v, ok := storage.Revision(s)
		if !ok {
			t.Fatalf("Secret %s is not a revision of %s", s.Name, upgradeRelease)
		}
		secrets[v] = s
	}
	return secrets
}

// latestRelease decodes the release's latest revision whole, chart and
// values included, as the locker hands it to Upgrade.
func latestRelease(t *testing.T, ns string) *render.Release {
	t.Helper()
	var latest *corev1.Secret
	best := 0
	for v, s := range releaseSecrets(t, ns) {
		if v > best {
			latest, best = s, v
		}
	}
	if latest == nil {
		t.Fatalf("release %s/%s has no revisions", ns, upgradeRelease)
	}
	// These tests drive the SDK with no lock: nothing verified the
	// revision, and the tests wrote it themselves, through helm.
	rel, err := render.DecodeUntrusted(latest, ns, upgradeRelease)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// revisionStatuses returns each stored revision's status, checking that
// the Secret's status label says the same as the release it holds.
func revisionStatuses(t *testing.T, ns string) map[int]string {
	t.Helper()
	statuses := map[int]string{}
	for v, s := range releaseSecrets(t, ns) {
		rel, err := storage.Decode(s.Data["release"])
		if err != nil {
			t.Fatal(err)
		}
		if label := s.Labels[storage.LabelStatus]; label != rel.Info.Status.String() {
			t.Errorf("revision %d: status label %q, release says %q", v, label, rel.Info.Status)
		}
		statuses[v] = rel.Info.Status.String()
	}
	return statuses
}

// applyMethod returns a revision's apply_method, which Helm 3's types do
// not hold.
func applyMethod(t *testing.T, ns string, revision int) string {
	t.Helper()
	s, ok := releaseSecrets(t, ns)[revision]
	if !ok {
		t.Fatalf("release %s/%s has no revision %d", ns, upgradeRelease, revision)
	}
	rel, err := storage.Decode(s.Data["release"])
	if err != nil {
		t.Fatal(err)
	}
	return rel.ApplyMethod
}

// fieldOwners returns an object's managedFields as sorted "manager/operation"
// entries.
func fieldOwners(t *testing.T, resource, ns, name string) []string {
	t.Helper()
	obj := env.Get(t, "v1", resource, ns, name)
	if obj == nil {
		t.Fatalf("%s %s/%s does not exist", resource, ns, name)
	}
	var entries []string
	for _, f := range obj.GetManagedFields() {
		entries = append(entries, f.Manager+"/"+string(f.Operation))
	}
	sort.Strings(entries)
	return entries
}

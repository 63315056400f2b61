package upgrade_test

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/internal/upgrade"
)

// Upgrade revision 3 of release "web" in namespace "shop" as the
// namespace's ServiceAccount "deployer", as `helm upgrade --reuse-values`
// with the chart it was installed from would. The revision is read as its
// lock verified it (status.verified): only that chart is upgraded with.
func ExampleUpgrade() {
	ctx := context.Background()
	admin, err := rest.InClusterConfig()
	if err != nil {
		panic(err)
	}
	secret, err := kubernetes.NewForConfigOrDie(admin).CoreV1().Secrets("shop").Get(ctx, storage.SecretName("web", 3), metav1.GetOptions{})
	if err != nil {
		panic(err)
	}
	verified := render.Trusted{Revision: 3, ManifestDigest: "…", ChartDigest: "…"} // from the HelmRelease's status.verified
	rel, err := render.Decode(secret, "shop", "web", verified)
	if err != nil {
		panic(err) // *render.UntrustedError: the Secret was rewritten since
	}

	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:shop:deployer"}
	next, err := upgrade.Upgrade(ctx, cfg, rel, upgrade.DefaultOptions())
	if err != nil {
		panic(err) // Helm's error: a Forbidden, a failed render, upgrade.ErrReleaseChanged...
	}
	fmt.Println("revision", next.Version, next.Info.Status)
}

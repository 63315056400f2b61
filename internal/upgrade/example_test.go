package upgrade_test

import (
	"context"
	"encoding/json"
	"fmt"

	"helm.sh/helm/v3/pkg/release"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/internal/upgrade"
)

// Upgrade revision 3 of release "web" in namespace "shop" as the
// namespace's ServiceAccount "deployer", as `helm upgrade --reuse-values`
// with the chart it was installed from would.
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
	raw, err := storage.DecodeJSON(secret.Data["release"])
	if err != nil {
		panic(err)
	}
	var rel release.Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		panic(err)
	}

	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:shop:deployer"}
	next, err := upgrade.Upgrade(ctx, cfg, &rel, upgrade.DefaultOptions())
	if err != nil {
		panic(err) // Helm's error: a Forbidden, a failed render, upgrade.ErrReleaseChanged...
	}
	fmt.Println("revision", next.Version, next.Info.Status)
}

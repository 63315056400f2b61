package upgrade

import (
	"fmt"
	"sync"

	kubev3 "helm.sh/helm/v3/pkg/kube"
	kubev4 "helm.sh/helm/v4/pkg/kube"
)

// FieldManager is the field manager Helm's CLIs write as. They name it
// after their binary, which users call "helm"; both CLIs set it at
// startup (helm v3 cmd/helm/helm.go: kube.ManagedFieldsManager = "helm").
const FieldManager = "helm"

var fieldManagerOnce sync.Once

// useHelmFieldManager makes Helm's SDKs write as FieldManager.
//
// Both SDKs take their field manager from a package variable,
// kube.ManagedFieldsManager, and fall back to the process's binary name
// ("helm-locker", "upgrade.test") when it is empty: server-side apply by
// another manager than the install's would then leave the install's fields
// with "helm" and conflict with the next `helm upgrade`. The variables are
// read by Helm's pkg/kube alone, which nothing in this module but this
// package imports (TestOnlyUpgradeImportsHelmClients); the locker's own
// writes go through the engine's client, which names "helm-locker" on every
// request. They are set once, under a sync.Once every reader in this
// package passes first, so no Helm goroutine of ours reads them while they
// change. A process that chose another manager for Helm is not overruled:
// Upgrade then refuses, since the release would stop being Helm's.
func useHelmFieldManager() error {
	fieldManagerOnce.Do(func() {
		for _, v := range []*string{&kubev3.ManagedFieldsManager, &kubev4.ManagedFieldsManager} {
			if *v == "" {
				*v = FieldManager
			}
		}
	})
	for sdk, v := range map[string]string{"helm.sh/helm/v3": kubev3.ManagedFieldsManager, "helm.sh/helm/v4": kubev4.ManagedFieldsManager} {
		if v != FieldManager {
			return fmt.Errorf("%w: %s/pkg/kube.ManagedFieldsManager is %q, set elsewhere in this process; an upgrade must write as %q, as Helm's CLIs do", ErrFieldManager, sdk, v, FieldManager)
		}
	}
	return nil
}

package storage

import (
	"testing"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	// forget: the open lock lets the release's objects go to another lock
	// that declares them; only an uninstalled release does.
	tests := []struct {
		status release.Status
		engage bool
		state  v1alpha1.State
		forget bool
	}{
		{release.StatusDeployed, true, v1alpha1.StateDeployed, false},
		{release.StatusPendingInstall, false, v1alpha1.StateTransitioning, false},
		{release.StatusPendingUpgrade, false, v1alpha1.StateTransitioning, false},
		{release.StatusPendingRollback, false, v1alpha1.StateTransitioning, false},
		{release.StatusUninstalling, false, v1alpha1.StateTransitioning, false},
		{release.StatusFailed, false, v1alpha1.StateFailed, false},
		{release.StatusUninstalled, false, v1alpha1.StateUninstalled, true},
		{release.StatusSuperseded, false, v1alpha1.StateUnknown, false},
		{release.StatusUnknown, false, v1alpha1.StateUnknown, false},
		{"something-new", false, v1alpha1.StateUnknown, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			d := Decide(string(tt.status))
			if d.Engage != tt.engage || d.State != tt.state || d.Forget != tt.forget {
				t.Errorf("Decide(%q) = engage %v, state %s, forget %v; want engage %v, state %s, forget %v", tt.status, d.Engage, d.State, d.Forget, tt.engage, tt.state, tt.forget)
			}
			if !d.Engage && (d.Reason == "" || d.Message == "") {
				t.Errorf("Decide(%q) opens the lock without a reason and message: %+v", tt.status, d)
			}
			if Deployed(string(tt.status)) != tt.engage {
				t.Errorf("Deployed(%q) = %v", tt.status, !tt.engage)
			}
		})
	}
}

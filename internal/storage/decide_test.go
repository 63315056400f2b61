package storage

import (
	"testing"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		status release.Status
		engage bool
		state  v1alpha1.State
	}{
		{release.StatusDeployed, true, v1alpha1.StateDeployed},
		{release.StatusPendingInstall, false, v1alpha1.StateTransitioning},
		{release.StatusPendingUpgrade, false, v1alpha1.StateTransitioning},
		{release.StatusPendingRollback, false, v1alpha1.StateTransitioning},
		{release.StatusUninstalling, false, v1alpha1.StateTransitioning},
		{release.StatusFailed, false, v1alpha1.StateFailed},
		{release.StatusUninstalled, false, v1alpha1.StateUninstalled},
		{release.StatusSuperseded, false, v1alpha1.StateUnknown},
		{release.StatusUnknown, false, v1alpha1.StateUnknown},
		{"something-new", false, v1alpha1.StateUnknown},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			d := Decide(string(tt.status))
			if d.Engage != tt.engage || d.State != tt.state {
				t.Errorf("Decide(%q) = engage %v, state %s; want engage %v, state %s", tt.status, d.Engage, d.State, tt.engage, tt.state)
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

package lock

import (
	"testing"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

func TestNext(t *testing.T) {
	unlocked := Lock{Phase: Unlocked}
	tests := []struct {
		name string
		from Lock
		ev   Event
		want Lock
	}{
		{"zero value engages", Lock{}, Event{Type: Engage, Revision: 1}, Lock{Reconciling, 1}},
		{"engage from unlocked", unlocked, Event{Type: Engage, Revision: 3}, Lock{Reconciling, 3}},
		{"settle locks", Lock{Reconciling, 3}, Event{Type: Settle, Revision: 3}, Lock{Locked, 3}},
		{"settle of another revision is ignored", Lock{Reconciling, 3}, Event{Type: Settle, Revision: 2}, Lock{Reconciling, 3}},
		{"settle while unlocked stays unlocked", unlocked, Event{Type: Settle, Revision: 1}, unlocked},
		{"drift reconciles", Lock{Locked, 3}, Event{Type: Drift}, Lock{Reconciling, 3}},
		{"drift while reconciling stays", Lock{Reconciling, 3}, Event{Type: Drift}, Lock{Reconciling, 3}},
		{"drift while unlocked stays unlocked", unlocked, Event{Type: Drift}, unlocked},
		{"re-engaging the locked revision keeps it locked", Lock{Locked, 3}, Event{Type: Engage, Revision: 3}, Lock{Locked, 3}},
		{"a new revision reconciles", Lock{Locked, 3}, Event{Type: Engage, Revision: 4}, Lock{Reconciling, 4}},
		{"a new revision while reconciling", Lock{Reconciling, 3}, Event{Type: Engage, Revision: 4}, Lock{Reconciling, 4}},
		{"open from locked", Lock{Locked, 3}, Event{Type: Open}, unlocked},
		{"open from reconciling", Lock{Reconciling, 3}, Event{Type: Open}, unlocked},
		{"open while unlocked", unlocked, Event{Type: Open}, unlocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.from.Next(tt.ev); got != tt.want {
				t.Errorf("%+v.Next(%+v) = %+v, want %+v", tt.from, tt.ev, got, tt.want)
			}
		})
	}
}

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
			d := Decide(tt.status)
			if d.Engage != tt.engage || d.State != tt.state {
				t.Errorf("Decide(%q) = engage %v, state %s; want engage %v, state %s", tt.status, d.Engage, d.State, tt.engage, tt.state)
			}
			if !d.Engage && (d.Reason == "" || d.Message == "") {
				t.Errorf("Decide(%q) opens the lock without a reason and message: %+v", tt.status, d)
			}
		})
	}
}

package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestOwnWrites follows a claim (RV 1 to 2) and a status write (2 to 3)
// made over a cached CR at RV 1, and checks what a sync sees as the cache
// catches up.
func TestOwnWrites(t *testing.T) {
	var w ownWrites
	cached := func(rv string) *v1alpha1.HelmRelease {
		return &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	}
	hr := cached("1")
	w.claimed(hr, "me", "2")
	w.wroteStatus(hr, v1alpha1.HelmReleaseStatus{State: v1alpha1.StateDeployed})

	tests := []struct {
		rv        string
		wantClaim string
		wantState v1alpha1.State
	}{
		{rv: "1", wantClaim: "me", wantState: v1alpha1.StateDeployed}, // the cache shows neither write
		{rv: "2", wantState: v1alpha1.StateDeployed},                  // it shows the claim only
		{rv: "3"}, // it shows both: nothing is applied, and all is forgotten
		{rv: "1"}, // forgotten: a cache cannot go back, and nothing is applied
	}
	for _, tt := range tests {
		hr := cached(tt.rv)
		w.apply(hr)
		if got := hr.Annotations[v1alpha1.ManagedByAnnotation]; got != tt.wantClaim {
			t.Errorf("cache at %s: claim %q, want %q", tt.rv, got, tt.wantClaim)
		}
		if hr.Status.State != tt.wantState {
			t.Errorf("cache at %s: state %q, want %q", tt.rv, hr.Status.State, tt.wantState)
		}
	}
}

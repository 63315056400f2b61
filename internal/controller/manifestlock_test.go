package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
)

// TestServesManifestLock: one locker per lock, whatever the cluster runs.
func TestServesManifestLock(t *testing.T) {
	lock := func(namespace, owner string) *mlv1.ManifestLock {
		ml := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "l"}}
		if owner != "" {
			ml.Annotations = map[string]string{mlv1.ManagedByAnnotation: owner}
		}
		return ml
	}
	tests := []struct {
		name    string
		tenants bool
		ml      *mlv1.ManifestLock
		want    bool
	}{
		{"registration namespace", false, lock("reg", ""), true},
		{"registration namespace, another controller's", true, lock("reg", "other"), false},
		{"tenant, served", true, lock("apps", ""), true},
		{"tenant, not served here", false, lock("apps", ""), false},
		{"tenant, named to this controller", false, lock("apps", "me"), true},
		{"tenant, named to another", true, lock("apps", "other"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Controller{cfg: Config{Namespace: "reg", ControllerName: "me", TenantManifestLocks: tt.tenants}}
			if got := c.servesManifestLock(tt.ml); got != tt.want {
				t.Errorf("servesManifestLock = %v, want %v", got, tt.want)
			}
		})
	}
}

package admission

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/engine"
)

// TestMessageRedactsSecretData: a denial of a change to a locked Secret's
// data names the keys and never their values, which the engine leaves out
// (engine.TestJudgeSecretRedacted): the requester may patch the Secret
// without being allowed to read it.
func TestMessageRedactsSecretData(t *testing.T) {
	j := engine.Judgement{Key: "ns/web", Kind: "Secret",
		Ref:    engine.ObjectRef{GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "ns", Name: "s"},
		Fields: []engine.DeniedField{{Path: "/data/password", Redacted: true}, {Path: "/type", Declared: "Opaque"}}}
	got := message(j, "HelmRelease ns/web", "helm upgrade web -n ns")
	want := `Secret ns/s is locked by HelmRelease ns/web: /data/password must stay as declared (a Secret's value is not shown), /type must stay "Opaque"; to change it: helm upgrade web -n ns`
	if got != want {
		t.Errorf("message\n got %s\nwant %s", got, want)
	}
}

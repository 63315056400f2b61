package render

import (
	"encoding/json"
	"fmt"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"

	"github.com/helm-locker/helm-locker/internal/storage"
)

// Decode reads the whole release a release Secret stores, chart and user
// values included, which storage.Read leaves out to keep the lock's hot
// path small. A tenant who may write Secrets can write anything into one,
// so the Secret goes through storage.Read's checks (type, labels, name,
// bounded size, the identity it decodes to), inflated once by
// storage.ReadJSON, before its chart and values are decoded: they are
// rendered as release namespace/name. Its errors are
// *storage.InvalidError, naming the Secret.
func Decode(secret *corev1.Secret, namespace, name string) (*release.Release, error) {
	_, raw, err := storage.ReadJSON(secret, namespace, name)
	if err != nil {
		return nil, err
	}
	invalid := func(format string, args ...any) error {
		return &storage.InvalidError{Secret: secret.Namespace + "/" + secret.Name, Problem: fmt.Sprintf(format, args...)}
	}
	// The identity storage.ReadJSON checked is decoded from the same
	// JSON, so it is this release's.
	var rel release.Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		return nil, invalid("decoding release: %v", err)
	}
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		return nil, invalid("holds no chart to render")
	}
	return &rel, nil
}

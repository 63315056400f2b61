package twoway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// TestLimitToFitsTheSchema: a cause longer than the CRD lets
// status.rerender.cause be is cut to fit, ellipsis included: a longer one
// would fail the whole status write.
func TestLimitToFitsTheSchema(t *testing.T) {
	var causes []string
	for i := range 200 {
		causes = append(causes, fmt.Sprintf("lookup of ConfigMap apps/settings-%d changed", i))
	}
	cause := limitTo(strings.Join(causes, "; "), v1alpha1.MaxRenderCause)
	if len(cause) > v1alpha1.MaxRenderCause || !strings.HasSuffix(cause, "…") {
		t.Errorf("cause of %d bytes, ending %q; want at most %d, cut with an ellipsis", len(cause), cause[len(cause)-10:], v1alpha1.MaxRenderCause)
	}
	if got := limitTo("short", v1alpha1.MaxRenderCause); got != "short" {
		t.Errorf("limitTo of a short cause = %q", got)
	}
}

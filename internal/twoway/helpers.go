package twoway

import (
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxEventMessage bounds an event's message, as the controller's do.
const maxEventMessage = 1024

// condition is a condition of typ, True if status.
func condition(typ string, status bool, reason, message string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// limit is s cut to what a condition's message may hold.
func limit(s string) string { return limitTo(s, 4096) }

// limitTo is s cut to at most max bytes, an ellipsis included, for a
// field whose schema caps it (status.rerender.cause: 1024).
func limitTo(s string, max int) string {
	const ellipsis = "…"
	if len(s) > max {
		return s[:max-len(ellipsis)] + ellipsis
	}
	return s
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// impersonated is the user name of ServiceAccount name in namespace.
func impersonated(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Package metrics defines helm-locker's Prometheus metrics, including the
// workqueue metrics client-go reports through its MetricsProvider and the
// requests its REST clients send, and the HTTP handler that serves them.
package metrics

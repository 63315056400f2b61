// Package outage holds the e2e tests that take the API server away from a
// running locker: kube-apiserver stopped and started again, and watches cut
// and refused until the API server has compacted past them (410 Gone).
// They break the control plane they run on, so they have one of their own,
// and run one at a time.
package outage

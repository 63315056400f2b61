// Package webhook serves Prevent mode's admission webhook: the TLS server,
// its certificate (self-signed and kept in a Secret, or read from a
// folder), and the ValidatingWebhookConfiguration that sends the API
// server's requests to it. What it answers is package admission's.
package webhook

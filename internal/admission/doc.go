// Package admission answers the API server's validating admission requests
// for Prevent mode: a write that would drift an object a Prevent lock holds
// is denied, with a message that names the lock, each field and how to
// change it, and the requesting user is recorded. The decision is the
// engine's (see engine.Engine.Judge), from the declarations in memory; no
// OpenAPI document is read for it.
//
// The webhook fails open: the configuration it is served under says
// failurePolicy Ignore, and a replica that holds no declarations, or cannot
// confirm that Helm is not at work, allows. The revert stays the backstop.
package admission

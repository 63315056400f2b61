// Package sandbox renders a Helm release's chart again in a child process
// that the locker can stop. Helm's template engine takes no context and
// has no deadline: a template that loops (`until`, nested `range`) holds
// whatever runs it for as long as it loops, and one that allocates
// (`repeat`, string building) takes memory without bound. Run in the
// locker's own process, such a chart holds a render worker for good, or
// pushes the locker past its memory limit, and every lock stops with it.
//
// A Renderer runs each render in a process of the locker's own
// executable (its hidden Subcommand, which calls RunChild), with a
// wall-clock deadline, after which it is killed, and a memory cap the
// kernel enforces. The child decodes the release its parent checked and
// encoded, renders it with render.Render, and asks its parent for each
// lookup: the parent makes it through render.Lookups, with the caller's
// client, so the child holds no credentials and the parent records what
// was read. A render stopped at its deadline is a *TimeoutError, one
// stopped by its cap a *TooLargeError; every other error is the one
// render.Render returns for the same chart.
//
// The package never logs: its caller decides what a stopped render means.
package sandbox

package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/helm-locker/helm-locker/manifest"
)

// The parent and the child talk over two pipes, the child's descriptors 3
// (from the parent) and 4 (to it), leaving its stdout and stderr to what
// Helm's engine or Go's runtime print. Each message is a frame: its
// length, as 4 bytes big-endian, then that many bytes of JSON.
//
// The parent sends a job; the child answers with messages of its own
// (fromChild): a lookup to make, which the parent answers with a
// lookupAnswer, and, last, the render's end.

// maxFromChild bounds each message the parent reads from the child: a
// render's output, or a lookup it asks for. A manifest Helm can store
// (a Secret of at most 1 MiB, gzipped) is far smaller, unless it repeats
// itself; a render that prints more is stopped as too large, before the
// parent holds it.
const maxFromChild = 16 << 20

// maxToChild bounds what the child reads from its parent: a release (a
// Secret's data, inflated: storage.Read bounds it well below this) or a
// list lookup's answer (render.ListLookupBytes).
const maxToChild = 256 << 20

// job is the parent's first message: the revision to render, encoded by
// render.Release.EncodeForSandbox, and the cluster as .Capabilities gives
// it. The child has no client: its lookups are the parent's to make.
type job struct {
	Helm        manifest.Helm   `json:"helm"`
	Release     json.RawMessage `json:"release"`
	KubeVersion string          `json:"kubeVersion"`
	APIVersions []string        `json:"apiVersions"`
}

// fromChild is each message of the child: a lookup its chart makes, or
// the render's end.
type fromChild struct {
	Lookup *lookupCall `json:"lookup,omitempty"`
	Done   *done       `json:"done,omitempty"`
}

// lookupCall is a lookup as a chart's template makes it:
// `lookup apiVersion kind namespace name`.
type lookupCall struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
}

// lookupAnswer is the parent's answer to a lookupCall: the object, or the
// list's content, as JSON; or that nothing was found; or that the lookup
// failed, which the parent recorded, and which stops the render.
type lookupAnswer struct {
	Object   json.RawMessage `json:"object,omitempty"`
	NotFound bool            `json:"notFound,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// done is the render's end: render.Output, but for its lookups, which the
// parent recorded; or how it failed.
type done struct {
	Manifest         string   `json:"manifest,omitempty"`
	ReadsAPIVersions bool     `json:"readsAPIVersions,omitempty"`
	ReadsKubeVersion bool     `json:"readsKubeVersion,omitempty"`
	Failure          *failure `json:"failure,omitempty"`
}

// failure is a render's error, as far as a caller sorts it: a chart that
// cannot be rendered from its release (render.NotRenderableError) keeps
// its type, every other error its message. A lookup that failed is the
// parent's to report: it made it.
type failure struct {
	Message string `json:"message"`
	// NotRenderable holds a render.NotRenderableError's fields, its Err
	// in Message.
	NotRenderable *notRenderable `json:"notRenderable,omitempty"`
}

type notRenderable struct {
	Chart        string   `json:"chart"`
	Dependencies []string `json:"dependencies"`
}

// frameTooLargeError says a message was longer than its reader reads.
type frameTooLargeError struct{ size, limit uint32 }

func (e *frameTooLargeError) Error() string {
	return fmt.Sprintf("a message of %d bytes, over the %d read", e.size, e.limit)
}

// writeFrame writes v as one frame.
func writeFrame(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > 1<<31 {
		return errors.New("a message too large to frame")
	}
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], uint32(len(data)))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// readFrame reads one frame of at most limit bytes into v. The length is
// checked before anything is allocated for it.
func readFrame(r io.Reader, limit uint32, v any) error {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(head[:])
	if size > limit {
		return &frameTooLargeError{size: size, limit: limit}
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return fmt.Errorf("a message cut short: %w", err)
	}
	return json.Unmarshal(data, v)
}

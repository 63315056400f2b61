package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Artifact is what a source's status.artifact says of one revision.
type Artifact struct {
	// URL is where it is served.
	URL string
	// Revision names it for people: a branch and commit, a tag and
	// digest.
	Revision string
	// Digest is "sha256:" and the hex digest of the tar.gz.
	Digest string
}

// SourceVersions are the versions of Flux's source kinds, newest first: a
// cluster that serves a kind only at v1beta2 is read there.
var SourceVersions = []string{"v1", "v1beta2"}

// FromStatus reads the artifact a Flux source's status.artifact names;
// false if it names none yet.
func FromStatus(source map[string]any) (Artifact, bool) {
	url, _, _ := unstructured.NestedString(source, "status", "artifact", "url")
	digest, _, _ := unstructured.NestedString(source, "status", "artifact", "digest")
	revision, _, _ := unstructured.NestedString(source, "status", "artifact", "revision")
	if url == "" || digest == "" {
		return Artifact{}, false
	}
	return Artifact{URL: url, Digest: digest, Revision: revision}, true
}

// Limits cap what an artifact may cost. Zero fields take the defaults.
type Limits struct {
	// MaxDownload caps the tar.gz's bytes (default 100 MiB).
	MaxDownload int64
	// MaxUnpacked caps the bytes of its files (default 500 MiB).
	MaxUnpacked int64
	// MaxFiles caps its entries, files and folders (default 10,000).
	MaxFiles int
}

// The default limits.
const (
	DefaultMaxDownload = 100 << 20
	DefaultMaxUnpacked = 500 << 20
	DefaultMaxFiles    = 10000
)

func (l Limits) withDefaults() Limits {
	if l.MaxDownload <= 0 {
		l.MaxDownload = DefaultMaxDownload
	}
	if l.MaxUnpacked <= 0 {
		l.MaxUnpacked = DefaultMaxUnpacked
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	return l
}

// Reason says why an artifact was refused.
type Reason string

// The reasons.
const (
	// DigestMismatch: the bytes served are not those the status names.
	DigestMismatch Reason = "DigestMismatch"
	// TooLarge: past a cap of Limits.
	TooLarge Reason = "TooLarge"
	// Unsafe: an entry that is not a plain file or folder, or whose path
	// leaves the artifact.
	Unsafe Reason = "Unsafe"
	// Unreadable: not a tar.gz.
	Unreadable Reason = "Unreadable"
	// Unavailable: it could not be downloaded.
	Unavailable Reason = "Unavailable"
)

// Error is an artifact refused, and why.
type Error struct {
	Reason   Reason
	Revision string
	Message  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("artifact of revision %s: %s", e.Revision, e.Message)
}

func refuse(a Artifact, reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Revision: a.Revision, Message: fmt.Sprintf(format, args...)}
}

// Fetch downloads a with client and unpacks it. Its digest is checked on
// the bytes as downloaded, before they are decompressed.
func Fetch(ctx context.Context, client *http.Client, a Artifact, limits Limits) (Files, error) {
	limits = limits.withDefaults()
	algorithm, want, ok := strings.Cut(a.Digest, ":")
	if !ok || algorithm != "sha256" || len(want) != sha256.Size*2 {
		return nil, refuse(a, DigestMismatch, "status.artifact.digest %q is not a sha256 digest", a.Digest)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return nil, refuse(a, Unavailable, "status.artifact.url %q: %v", a.URL, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, refuse(a, Unavailable, "downloading %s: %v", a.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refuse(a, Unavailable, "downloading %s: %s", a.URL, resp.Status)
	}
	if resp.ContentLength > limits.MaxDownload {
		return nil, refuse(a, TooLarge, "%s is %d bytes, past the cap of %d", a.URL, resp.ContentLength, limits.MaxDownload)
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, limits.MaxDownload+1))
	if err != nil {
		return nil, refuse(a, Unavailable, "downloading %s: %v", a.URL, err)
	}
	if n > limits.MaxDownload {
		return nil, refuse(a, TooLarge, "%s is past the cap of %d bytes", a.URL, limits.MaxDownload)
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, refuse(a, DigestMismatch, "%s has digest sha256:%s, not the %s its source's status names", a.URL, got, a.Digest)
	}
	files, err := Unpack(&buf, limits)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Revision = a.Revision
		}
		return nil, err
	}
	return files, nil
}

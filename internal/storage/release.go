package storage

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/manifest"
)

// ApplyMethodServerSide is the apply_method Helm 4 records for releases it
// installed with server-side apply. Helm 3 records none.
const ApplyMethodServerSide = "ssa"

// Release is the part of a stored Helm release the locker needs. Decoding
// into it rather than release.Release skips the chart's templates and
// files, which are most of a release's bytes.
type Release struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"`
	Version   int           `json:"version"`
	Info      *release.Info `json:"info"`
	Manifest  string        `json:"manifest"`
	// ApplyMethod is "ssa" when Helm 4 applied the release with server-side
	// apply, and empty or "csa" for client-side apply.
	ApplyMethod string `json:"apply_method,omitempty"`
}

// ApplyManager is the field manager Helm 4 applies as: it names its
// manager after its binary, which users call "helm".
const ApplyManager = "helm"

// ApplyManager returns the field manager that applied the release with
// server-side apply, or "" if Helm wrote it client-side.
func (r *Release) ApplyManager() string {
	if r.ApplyMethod == ApplyMethodServerSide {
		return ApplyManager
	}
	return ""
}

var gzipMagic = []byte{0x1f, 0x8b, 0x08}

// MaxStored bounds a release as stored, Helm's base64 text: the API
// server refuses a Secret whose data add up to more than 1 MiB.
const MaxStored = 1 << 20

// MaxInflated bounds a release's JSON once inflated: 32 times the 1 MiB
// the API server lets a Secret hold. Helm's gzip shrinks real charts'
// JSON (templates, values, base64 of files) 3 to 10 times, so a real
// release is far from it; a crafted one inflates 1 MiB to about 1 GiB
// (gzip's limit is about 1032:1). Each sync worker may inflate one release
// at a time, so the locker holds at most Workers times this while it
// decodes.
const MaxInflated = 32 << 20

// Decode decodes the value of a release Secret's "release" key as the
// Kubernetes API returns it (Secret.Data, one layer of base64 already
// removed): base64, then gzip, then JSON, as Helm's Secret driver writes
// it. Releases stored before Helm compressed them are accepted too.
func Decode(data []byte) (*Release, error) {
	buf := gunzipped.Get().(*[]byte)
	defer func() {
		// A buffer grown past any real release would be kept by the
		// pool for as long as the process runs.
		if cap(*buf) <= maxPooled {
			gunzipped.Put(buf)
		}
	}()
	raw, err := decodeJSON(data, buf)
	if err != nil {
		return nil, err
	}
	var rel Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		return nil, fmt.Errorf("decoding release: %w", err)
	}
	return &rel, nil
}

// DecodeJSON is Decode up to the release's JSON, all of it: the chart, its
// values and its templates too. It does not check the JSON.
func DecodeJSON(data []byte) ([]byte, error) { return decodeJSON(data, new([]byte)) }

// Decoding a release reads a chart's JSON, tens to hundreds of kilobytes,
// to keep its manifest; at startup, once for every release. Decode copies
// what it keeps, so the buffers and gzip readers serve again.
var (
	gunzipped = sync.Pool{New: func() any { return new([]byte) }}
	gunzips   sync.Pool
)

// maxPooled is the largest inflate buffer kept for the next release: a
// large chart's.
const maxPooled = 4 << 20

// decodeJSON is DecodeJSON, inflating into buf: what it returns is buf's
// if the release was gzipped.
func decodeJSON(data []byte, buf *[]byte) ([]byte, error) {
	if len(data) > MaxStored {
		return nil, fmt.Errorf("decoding release: %d bytes stored, more than a Secret may hold (%d)", len(data), MaxStored)
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(data)))
	n, err := base64.StdEncoding.Decode(raw, data)
	if err != nil {
		return nil, fmt.Errorf("decoding release: not base64: %w", err)
	}
	raw = raw[:n]
	if !bytes.HasPrefix(raw, gzipMagic) {
		return raw, nil
	}
	zr, _ := gunzips.Get().(*gzip.Reader)
	if zr == nil {
		zr = new(gzip.Reader)
	}
	defer gunzips.Put(zr)
	if err := zr.Reset(bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("decoding release: %w", err)
	}
	if *buf, err = inflate(zr, (*buf)[:0], inflatedSize(raw)); err != nil {
		return nil, fmt.Errorf("decoding release: %w", err)
	}
	return *buf, nil
}

// inflatedSize is the size gzip's trailer gives, modulo 4 GiB: what Helm
// wrote, unless someone else wrote the Secret.
func inflatedSize(gz []byte) int {
	if len(gz) < 4 {
		return 0
	}
	return int(binary.LittleEndian.Uint32(gz[len(gz)-4:]))
}

// inflate reads r to its end into buf, sized first for hint bytes, and
// refuses past MaxInflated. It grows buf itself, to at most one byte past
// the bound: bytes.Buffer would double past it, and keep the smaller
// copies as garbage, which took a crafted release's 32 MiB to 170 MiB of
// the locker's memory.
func inflate(r io.Reader, buf []byte, hint int) ([]byte, error) {
	const limit = MaxInflated + 1 // to tell a release at the bound from one past it
	if want := min(hint+bytes.MinRead, limit); cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), bytes.MinRead), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > MaxInflated:
			return nil, fmt.Errorf("it inflates to more than %d MiB, the bound of a release's JSON; not reading it", MaxInflated>>20)
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, fmt.Errorf("gunzip: %w", err)
		}
	}
}

// Objects parses the release's manifest into the objects it declares, in
// manifest order, as Helm applies them (see manifest.ParseHelm), with the
// ownership metadata Helm adds as it applies. Its errors name the release,
// the revision and the document at fault.
func (r *Release) Objects() ([]*unstructured.Unstructured, error) {
	objs, err := manifest.ParseHelm(r.Manifest)
	if err != nil {
		return nil, fmt.Errorf("release %s/%s revision %d, %w", r.Namespace, r.Name, r.Version, err)
	}
	for _, obj := range objs {
		r.holdOwnership(obj)
	}
	return objs, nil
}

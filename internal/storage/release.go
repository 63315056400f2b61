package storage

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
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
	// ChartJSON and ConfigJSON are digests of the chart and the user
	// values as stored (see ChartDigest); decoding them costs a hash of
	// their bytes, not a copy.
	ChartJSON  jsonDigest `json:"chart"`
	ConfigJSON jsonDigest `json:"config"`
}

// jsonDigest is the sha256 of a JSON value as it is written.
type jsonDigest [sha256.Size]byte

func (d *jsonDigest) UnmarshalJSON(b []byte) error {
	*d = sha256.Sum256(b)
	return nil
}

// ChartDigest identifies the chart and the user values the revision
// stores, which a render of the revision runs: a Secret writer can rewrite
// both in place and leave the manifest as it was, so a lock records this
// digest with the revision it verifies, and renders only a chart whose
// digest is still the one recorded. It is a digest of the JSON as Helm
// wrote it, which Helm writes again unchanged when it marks the revision
// superseded (it decodes and encodes the same types).
func (r *Release) ChartDigest() string {
	h := sha256.New()
	h.Write(r.ChartJSON[:])
	h.Write(r.ConfigJSON[:])
	return hex.EncodeToString(h.Sum(nil))
}

// Digest is the sha256 of s in hex, as a verified revision records its
// manifest's.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Helm is the Helm that wrote the revision: Helm 4 records an apply_method
// ("ssa" or "csa") in every release it stores, and Helm 3 none. It is read
// from the release's JSON, where Helm wrote it, never from the Secret's
// labels, which anyone who may patch the Secret can set without decoding
// it.
func (r *Release) Helm() manifest.Helm {
	if r.ApplyMethod != "" {
		return manifest.Helm4
	}
	return manifest.Helm3
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
// (gzip's limit is about 1032:1).
const MaxInflated = 32 << 20

// Budget is what the process spends at once, in bytes, on inflating
// releases and parsing their manifests, however many workers decode: a
// release takes its inflated size from it, and its manifest four times its
// size, the most a parse was seen to hold, and waits while too little is
// left. Without it, every sync worker (64 by default) could inflate a
// release at the bound at once: 2 GiB, four times the chart's memory
// limit. A real release takes well under a megabyte of it, so it holds
// back nothing but crafted ones.
const Budget = 2 * MaxInflated

// spending is the process's Budget.
var spending = newBudget(Budget)

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
	var rel Release
	err := decodeJSON(data, buf, func(raw []byte) error {
		if err := json.Unmarshal(raw, &rel); err != nil {
			return fmt.Errorf("decoding release: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rel, nil
}

// DecodeJSON is Decode up to the release's JSON, all of it: the chart, its
// values and its templates too. It does not check the JSON.
func DecodeJSON(data []byte) ([]byte, error) {
	var out []byte
	err := decodeJSON(data, new([]byte), func(raw []byte) error {
		out = raw
		return nil
	})
	return out, err
}

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

// decodeJSON is DecodeJSON, inflating into buf, and handing the JSON to
// use while the release's size is taken from the Budget: what use gets is
// buf's if the release was gzipped.
func decodeJSON(data []byte, buf *[]byte, use func([]byte) error) error {
	if len(data) > MaxStored {
		return fmt.Errorf("decoding release: %d bytes stored, more than a Secret may hold (%d)", len(data), MaxStored)
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(data)))
	n, err := base64.StdEncoding.Decode(raw, data)
	if err != nil {
		return fmt.Errorf("decoding release: not base64: %w", err)
	}
	raw = raw[:n]
	if !bytes.HasPrefix(raw, gzipMagic) {
		return use(raw)
	}
	// Helm writes one gzip member, whose trailer gives its size (modulo
	// 4 GiB): what it inflates to. The size is known before anything is
	// inflated, so a release past the bound costs nothing, and one that
	// inflates past what its trailer says was not written by Helm.
	size := inflatedSize(raw)
	if size > MaxInflated {
		return fmt.Errorf("decoding release: it inflates to %d bytes, more than the %d (%d MiB) a release's JSON may take; not reading it", size, MaxInflated, MaxInflated>>20)
	}
	spending.take(int64(size))
	defer spending.give(int64(size))
	zr, _ := gunzips.Get().(*gzip.Reader)
	if zr == nil {
		zr = new(gzip.Reader)
	}
	defer gunzips.Put(zr)
	if err := zr.Reset(bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("decoding release: %w", err)
	}
	if *buf, err = inflate(zr, (*buf)[:0], size); err != nil {
		return fmt.Errorf("decoding release: %w", err)
	}
	return use(*buf)
}

// inflatedSize is the size gzip's trailer gives, modulo 4 GiB.
func inflatedSize(gz []byte) int {
	if len(gz) < 4 {
		return 0
	}
	return int(binary.LittleEndian.Uint32(gz[len(gz)-4:]))
}

// inflate reads r to its end into buf, and refuses more than size bytes:
// its first read allocates them all, and nothing is grown or copied.
func inflate(r io.Reader, buf []byte, size int) ([]byte, error) {
	// One byte more tells a release of size bytes from a larger one.
	if cap(buf) < size+1 {
		buf = make([]byte, 0, size+1)
	}
	for {
		n, err := r.Read(buf[len(buf) : size+1])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > size:
			return nil, fmt.Errorf("it inflates past the %d bytes its gzip trailer gives, which Helm's gzip never does; not reading it", size)
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, fmt.Errorf("gunzip: %w", err)
		}
	}
}

// budget is a count of bytes that callers take and give back, waiting
// while too few are left. Each take is at most the whole, so every caller
// is served once those before it give theirs back.
type budget struct {
	mu   sync.Mutex
	more *sync.Cond
	left int64
}

func newBudget(n int64) *budget {
	b := &budget{left: n}
	b.more = sync.NewCond(&b.mu)
	return b
}

func (b *budget) take(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.left < n {
		b.more.Wait()
	}
	b.left -= n
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
	b.more.Broadcast()
}

// Objects parses the release's manifest into the objects it declares, in
// manifest order, as the Helm that wrote the revision applied them (see
// Helm and manifest.ParseRelease), with the ownership metadata Helm adds as
// it applies. Its errors name the release, the revision and the document
// at fault.
func (r *Release) Objects() ([]*unstructured.Unstructured, error) {
	cost := min(4*int64(len(r.Manifest)), Budget)
	spending.take(cost)
	objs, err := manifest.ParseRelease(r.Manifest, r.Helm())
	spending.give(cost)
	if err != nil {
		return nil, fmt.Errorf("release %s/%s revision %d, %w", r.Namespace, r.Name, r.Version, err)
	}
	for _, obj := range objs {
		r.holdOwnership(obj)
	}
	return objs, nil
}

package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"sync"
	"unique"
	"unsafe"

	"github.com/klauspost/compress/flate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// A locked object's declaration is the one thing the engine keeps of it
// for as long as the lock, and most of what a lock costs: as JSON, about a
// kilobyte for a ConfigMap with a config file. Kept deflated, it takes a
// third of that, and inflating it when an event needs it costs a few
// microseconds beside the check's hundred.

// declarationDict primes the compressor with what every declaration says,
// so that small objects compress too: a tree (see appendTree) of the
// fields charts' objects have.
var declarationDict = mustTree(declarationDictJSON)

// declarationDictJSON is declarationDict as JSON.
const declarationDictJSON = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"meta.helm.sh/release-name":"","meta.helm.sh/release-namespace":""},"labels":{"app.kubernetes.io/instance":"","app.kubernetes.io/managed-by":"Helm","app.kubernetes.io/name":"","app.kubernetes.io/part-of":"","app.kubernetes.io/version":"","helm.sh/chart":""},"name":"","namespace":""},"spec":{"selector":{"matchLabels":{}},"template":{"metadata":{"labels":{}},"spec":{"containers":[{"name":"","image":"","ports":[{"containerPort":8080,"name":"http","protocol":"TCP"}],"resources":{"limits":{"cpu":"","memory":""},"requests":{"cpu":"","memory":""}}}]}}},"data":{}}`

// mustTree is the tree of a JSON object written in this package.
func mustTree(j string) []byte {
	var v any
	if err := utiljson.Unmarshal([]byte(j), &v); err != nil {
		panic(err)
	}
	b, err := appendTree(nil, v)
	if err != nil {
		panic(err)
	}
	return b
}

// deflateLevel is the compression a declaration is packed at, once, and
// kept at for the lock's life. The compressor is klauspost/compress's:
// the standard library's clears 640 KB of match tables at every Reset and
// builds Huffman tables at every Close, which took 12% of the locker's
// CPU in a burst of 100,000 objects, for objects of a kilobyte or less.
// klauspost's level 4 packs a ConfigMap of a 1 KB config file, as a tree,
// to 435 bytes in about half the time the standard library's level 2 took
// for 437 (BenchmarkPackDeclaration); its levels 1 and 2, faster still,
// hardly use declarationDict (454 and 449 bytes), and every byte kept is
// kept for each locked object.
const deflateLevel = 4

// smallTree is the size under which a tree is deflated statelessly:
// klauspost's writer at levels 1 to 6 does not look for matches in
// fewer than 128 bytes, and packs a small Secret's 107 to 114 bytes where
// the standard library packed 54; flate.StatelessDeflate matches them
// against declarationDict, to 56, faster still.
const smallTree = 128

var (
	deflaters = sync.Pool{New: func() any {
		w, _ := flate.NewWriterDict(nil, deflateLevel, declarationDict) // fails only for a bad level
		return w
	}}
	inflaters = sync.Pool{New: func() any { return flate.NewReaderDict(bytes.NewReader(nil), declarationDict) }}
	// buffers holds the buffers declarations are packed and inflated
	// into: what is kept is copied out, so a buffer serves again, and the
	// cold lock, which packs every declaration and reads it back once,
	// does not grow one anew for each.
	buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	// trees holds the buffers declarations are written into as trees
	// before they are deflated.
	trees = sync.Pool{New: func() any { return new([]byte) }}
)

// packDeclaration encodes obj as a lockedObject keeps its declaration: a
// tree (see appendTree), deflated.
func packDeclaration(obj *unstructured.Unstructured) ([]byte, error) {
	return pack(obj, 0)
}

// lengthPrefix is the size of the length a kept declaration starts with
// (see packKept).
const lengthPrefix = 4

// packKept packs obj as lockedObject.declared keeps it: a pointer to one
// allocation, the packed bytes' length then the bytes (see kept). A
// []byte behind an atomic pointer would cost a 24-byte slice header of
// its own for every locked object, in a size class the cold lock's
// garbage leaves mostly empty.
func packKept(obj *unstructured.Unstructured) (*byte, error) {
	b, err := pack(obj, lengthPrefix)
	if err != nil {
		return nil, err
	}
	if len(b)-lengthPrefix > math.MaxUint32 {
		return nil, fmt.Errorf("the declared object packs to %d bytes, over %d", len(b)-lengthPrefix, math.MaxUint32)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-lengthPrefix))
	return &b[0], nil
}

// kept returns the packed declaration packKept made p point to.
func kept(p *byte) []byte {
	n := binary.LittleEndian.Uint32(unsafe.Slice(p, lengthPrefix))
	return unsafe.Slice(p, lengthPrefix+int(n))[lengthPrefix:]
}

// pack packs obj into a slice cut to size, after prefix bytes left zero.
func pack(obj *unstructured.Unstructured, prefix int) ([]byte, error) {
	tree := trees.Get().(*[]byte)
	defer trees.Put(tree)
	b, err := appendTree((*tree)[:0], obj.Object)
	if err != nil {
		return nil, err
	}
	*tree = b
	buf := buffers.Get().(*bytes.Buffer)
	defer buffers.Put(buf)
	buf.Reset()
	if err := deflate(buf, b); err != nil {
		return nil, err
	}
	// What is kept for the lock's life is cut to size.
	out := make([]byte, prefix+buf.Len())
	copy(out[prefix:], buf.Bytes())
	return out, nil
}

// deflate writes tree to buf deflated, primed with declarationDict.
func deflate(buf *bytes.Buffer, tree []byte) error {
	if len(tree) < smallTree {
		return flate.StatelessDeflate(buf, tree, true, declarationDict)
	}
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(buf)
	if _, err := w.Write(tree); err != nil {
		return err
	}
	return w.Close()
}

// unpackDeclaration decodes what packDeclaration encoded.
func unpackDeclaration(data []byte) (*unstructured.Unstructured, error) {
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(data), declarationDict); err != nil {
		return nil, err
	}
	raw := buffers.Get().(*bytes.Buffer)
	defer buffers.Put(raw)
	raw.Reset()
	if _, err := raw.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("inflating the declared object: %w", err)
	}
	v, err := readTree(raw.Bytes())
	if err != nil {
		return nil, fmt.Errorf("decoding the declared object: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decoding the declared object: %w", errTree)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// kindOf is the kind a declaration read back (see unpackDeclaration)
// names, for what outlives the read: a Drift, a Judgement. Every string of
// a declaration read back shares one allocation, the size of the whole
// object, so a kind kept as it is keeps that alive (a whole ConfigMap per
// drifted object, held in the lock's last drift and events). Kinds are
// few: the one copy of each is shared.
func kindOf(declared *unstructured.Unstructured) string {
	return unique.Make(declared.GetKind()).Value()
}

// digestOf identifies a packed declaration: equal declarations pack to equal
// bytes.
func digestOf(data []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(data)
	return h.Sum64()
}

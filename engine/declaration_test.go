package engine

import (
	"bytes"
	stdflate "compress/flate"
	"encoding/json"
	"io"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/flate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestDeclarationsRoundTrip(t *testing.T) {
	for name, y := range map[string]string{
		"config file ending in a line break": `
apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: ns, labels: {app.kubernetes.io/managed-by: Helm}}
data:
  app.conf: |
    listen = 8080
    upstream = svc-4f2a9c.backend.svc.cluster.local:9443
    timeout = 30s
`,
		"deployment": benchDeployment,
		"nothing but a name": `
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
`,
	} {
		t.Run(name, func(t *testing.T) {
			want := &unstructured.Unstructured{Object: obj(t, y)}
			packed, err := packDeclaration(want)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := want.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			// Deflate's framing costs a few bytes, which only the
			// smallest objects do not win back.
			if len(raw) > 256 && len(packed) >= len(raw)*2/3 {
				t.Errorf("packed %d bytes of its %d bytes of JSON, more than two thirds", len(packed), len(raw))
			}
			got, err := unpackDeclaration(packed)
			if err != nil {
				t.Fatal(err)
			}
			// As a lockedObject keeps it: its length, then the same bytes.
			at, err := packKept(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kept(at), packed) {
				t.Errorf("kept declaration %x, want %x", kept(at), packed)
			}
			if diff := cmp.Diff(want.Object, got.Object); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := unpackDeclaration([]byte("not deflated")); err == nil {
		t.Errorf("unpacking garbage gave no error")
	}
}

// BenchmarkDeclaration is what an event pays to read a declaration back:
// a Deployment's, and a ConfigMap's of a config file, as the tree it is
// kept as and, for the ratio in one run, as the deflated JSON it was kept
// as before.
func BenchmarkDeclaration(b *testing.B) {
	for _, o := range []struct {
		name string
		obj  *unstructured.Unstructured
	}{{"Deployment", &unstructured.Unstructured{Object: obj(b, benchDeployment)}}, {"ConfigMap", benchConfigMapFile()}} {
		for _, codec := range declarationCodecs {
			packed, err := codec.pack(o.obj)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(o.name+"/"+codec.name, func(b *testing.B) {
				b.ReportAllocs()
				b.ReportMetric(float64(len(packed)), "packed-bytes")
				for b.Loop() {
					if _, err := codec.unpack(packed); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// declarationCodecs are the tree declarations are kept as, the same tree
// deflated by the standard library at the level it was before, and the
// JSON they were kept as before that, for the benchmarks' ratios.
var declarationCodecs = []struct {
	name   string
	pack   func(*unstructured.Unstructured) ([]byte, error)
	unpack func([]byte) (*unstructured.Unstructured, error)
}{
	{"tree", packDeclaration, unpackDeclaration},
	{"tree-stdlib", packStdlib, unpackStdlib},
	{"JSON", packJSON, unpackJSON},
}

// packStdlib is packDeclaration as it was with compress/flate at level 2.
func packStdlib(obj *unstructured.Unstructured) ([]byte, error) {
	b, err := appendTree(nil, obj.Object)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := stdDeflaters.Get().(*stdflate.Writer)
	defer stdDeflaters.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unpackStdlib reads what packStdlib wrote.
func unpackStdlib(data []byte) (*unstructured.Unstructured, error) {
	r := stdInflaters.Get().(io.ReadCloser)
	defer stdInflaters.Put(r)
	if err := r.(stdflate.Resetter).Reset(bytes.NewReader(data), declarationDict); err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(r); err != nil {
		return nil, err
	}
	v, err := readTree(raw.Bytes())
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: v.(map[string]any)}, nil
}

// packJSON is how declarations were packed before trees: JSON, deflated
// with the same dictionary as JSON, by pooled compressors as
// packDeclaration's.
func packJSON(obj *unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	w := jsonDeflaters.Get().(*flate.Writer)
	defer jsonDeflaters.Put(w)
	w.Reset(&buf)
	if err := json.NewEncoder(w).Encode(obj.Object); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unpackJSON reads what packJSON wrote.
func unpackJSON(data []byte) (*unstructured.Unstructured, error) {
	r := jsonInflaters.Get().(io.ReadCloser)
	defer jsonInflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(data), []byte(declarationDictJSON)); err != nil {
		return nil, err
	}
	raw := buffers.Get().(*bytes.Buffer)
	defer buffers.Put(raw)
	raw.Reset()
	if _, err := raw.ReadFrom(r); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw.Bytes())
}

var (
	stdDeflaters = sync.Pool{New: func() any {
		w, _ := stdflate.NewWriterDict(nil, 2, declarationDict)
		return w
	}}
	stdInflaters = sync.Pool{New: func() any {
		return stdflate.NewReaderDict(bytes.NewReader(nil), declarationDict)
	}}
	jsonDeflaters = sync.Pool{New: func() any {
		w, _ := flate.NewWriterDict(nil, deflateLevel, []byte(declarationDictJSON))
		return w
	}}
	jsonInflaters = sync.Pool{New: func() any {
		return flate.NewReaderDict(bytes.NewReader(nil), []byte(declarationDictJSON))
	}}
)

// benchConfigFile is a ConfigMap's config file, about a kilobyte, with the
// mix of names, numbers, addresses and ids that real ones have.
const benchConfigFile = `server.listen = 8080
upstream.timeout = 30s
upstream.backend = svc-3fa9c1.payments.svc.cluster.local:50051
cache.size = 52428
log.level = info
tls.cert = /etc/tls/tls.crt
pool.workers = 16
route.weight = 35
health.interval = 15s
health.path = /healthz
limit.retries = 3
backend.route = svc-0b77e2.orders.svc.cluster.local:8443
session.id = 9c1f3a77d2e84b06
cache.ttl = 600s
server.workers = 24
upstream.retries = 5
log.format = json
tls.enabled = true
pool.size = 128
route.backend = svc-a41d09.users.svc.cluster.local:9090
token.id = 4e0b9d2c6a1f8e35
limit.rate = 4500
health.timeout = 2s
backend.weight = 65
listen.tls = false
cache.path = /var/cache/app
interval.sync = 120s
server.id = 7d3e91c0ab52f468
`

// BenchmarkPackDeclaration is what a declaration costs to pack, once for
// each object at a cold lock, and what it then takes to keep: a ConfigMap
// of a config file, as most of a release's objects are, and a small
// Secret, as many are.
func BenchmarkPackDeclaration(b *testing.B) {
	for _, o := range []struct {
		name string
		obj  *unstructured.Unstructured
	}{{"ConfigMap", benchConfigMapFile()}, {"Secret", benchSecret()}} {
		for _, codec := range declarationCodecs {
			b.Run(o.name+"/"+codec.name, func(b *testing.B) {
				var packed []byte
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if packed, err = codec.pack(o.obj); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(packed)), "packed-bytes")
			})
		}
	}
}

// benchSecret is a chart's small Secret, whose tree is under smallTree.
func benchSecret() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": "web-token", "namespace": "shop", "labels": map[string]any{"app.kubernetes.io/instance": "web"}},
		"data":     map[string]any{"token": "c2VjcmV0"},
	}}
}

// benchConfigMapFile is a ConfigMap of benchConfigFile.
func benchConfigMapFile() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web-config", "namespace": "shop", "labels": map[string]any{"app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": "Helm"}},
		"data":     map[string]any{"app.conf": benchConfigFile},
	}}
}

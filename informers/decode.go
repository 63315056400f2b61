package informers

import (
	"bufio"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The watch path of a Registry given a REST config. client-go reads each
// watch event four times over before a Registry sees it (framing, the
// event, kind sniffing, and a full decode into an Unstructured), and at
// cold start on a cluster of mostly untracked objects that was half of the
// locker's CPU. This path frames and splits events with a light scanner,
// reads only the head of each object, and decodes in full only the
// objects a caller tracks; the others become Stubs without ever being
// decoded.

// maxFrame bounds one watch event. The API server refuses objects over
// about 3 MiB, so anything near this is a broken stream.
const maxFrame = 64 << 20

// watchClient opens watches whose objects are decoded per type, knowing
// which objects are tracked.
type watchClient struct {
	config *rest.Config
	http   *http.Client
}

func newWatchClient(config *rest.Config) (*watchClient, error) {
	config = dynamic.ConfigFor(config)
	// The scanner reads JSON; say so even where client-go would offer CBOR.
	config.ContentType = "application/json"
	config.AcceptContentTypes = "application/json"
	config.GroupVersion = nil
	config.APIPath = "/"
	h, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("informers: making an HTTP client for watches: %w", err)
	}
	return &watchClient{config: config, http: h}, nil
}

// watch watches gvr in every namespace, its objects decoded by d.
func (c *watchClient) watch(ctx context.Context, gvr schema.GroupVersionResource, d *objectDecoder, options metav1.ListOptions) (watch.Interface, error) {
	return c.watchIn(ctx, gvr, metav1.NamespaceAll, d, options)
}

// watchIn watches gvr in namespace, its objects decoded by d.
func (c *watchClient) watchIn(ctx context.Context, gvr schema.GroupVersionResource, namespace string, d *objectDecoder, options metav1.ListOptions) (watch.Interface, error) {
	config := *c.config
	config.NegotiatedSerializer = watchSerializer{objects: d}
	rc, err := rest.UnversionedRESTClientForConfigAndClient(&config, c.http)
	if err != nil {
		return nil, fmt.Errorf("informers: making a REST client for watches: %w", err)
	}
	return dynamic.New(rc).Resource(gvr).Namespace(namespace).Watch(ctx, options)
}

// watchSerializer serves one media type, JSON, with the decoders below.
// rest.Request.Watch asks it for a framer, an event decoder and an object
// decoder; error responses are decoded with the object decoder too.
type watchSerializer struct {
	objects *objectDecoder
}

var _ runtime.NegotiatedSerializer = watchSerializer{}

func (s watchSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	return []runtime.SerializerInfo{{
		MediaType:        "application/json",
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       s.objects,
		StreamSerializer: &runtime.StreamSerializerInfo{
			EncodesAsText: true,
			Serializer:    eventDecoder{},
			Framer:        framer{},
		},
	}}
}

func (watchSerializer) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}

func (watchSerializer) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}

// errReadOnly is what the watch path's serializers say when asked to
// encode: a watch has no request body.
var errReadOnly = errors.New("informers: the watch serializer only decodes")

// errNotAnEvent is a watch stream that holds something other than JSON
// objects.
var errNotAnEvent = errors.New("informers: watch stream holds something other than an event")

// objectDecoder decodes one object of a watch event.
type objectDecoder struct {
	// tracked decides, per object, whether it is decoded whole or
	// becomes a *Stub.
	tracked func(namespace, name string) bool
	// held, if set, names the labels and annotations held of a tracked
	// object (see Options.HeldMetadata).
	held func(namespace, name string) *HeldMetadata
	// unchanged reports whether the tracked object namespace/name is
	// stored as a stub of a version with this held fingerprint.
	unchanged func(namespace, name string, fingerprint uint64) bool
	// readsManagedFields, if set, reports whether what stores the
	// tracked object namespace/name reads its managedFields (see
	// Options.ReadsManagedFields); for the others they are decoded only
	// if the object is kept whole.
	readsManagedFields func(namespace, name string) bool
}

// fingerprinted is a tracked object decoded from a watch, with its held
// fingerprint, which the Registry keeps with the object's stub.
type fingerprinted struct {
	*unstructured.Unstructured
	fingerprint uint64
	// managedFields is the JSON of the object's metadata.managedFields,
	// left out of Unstructured, or nil when they are in it or it has
	// none (see withManagedFields).
	managedFields []byte
}

// statusDecoder decodes metav1.Status, the object of an ERROR event and the
// body of an error response.
var statusDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
}()

// Decode returns a *metav1.Status for a Status, a *watchStub for an
// object that is not tracked, and an *unstructured.Unstructured for the
// rest: tracked objects, and bookmarks, whose annotations the reflector
// reads.
func (d *objectDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	h, ok := readHead(data)
	if ok && string(h.apiVersion) == "v1" && string(h.kind) == "Status" {
		return statusDecoder.Decode(data, defaults, into)
	}
	stub := func(same bool) runtime.Object {
		return &watchStub{Stub: *newStub(string(h.namespace), string(h.name), string(h.resourceVersion)), same: same}
	}
	var fingerprint uint64
	if ok && into == nil && len(h.name) > 0 {
		if !d.tracked(string(h.namespace), string(h.name)) {
			return stub(false), nil, nil
		}
		// Another controller writing a locked object's status, or a
		// label of its own, the commonest events on a busy cluster,
		// change nothing a lock holds: they are neither decoded nor
		// checked again.
		var held *HeldMetadata
		if d.held != nil {
			held = d.held(string(h.namespace), string(h.name))
		}
		fingerprint = heldFingerprint(data, held)
		if fingerprint != 0 && d.unchanged != nil && d.unchanged(string(h.namespace), string(h.name), fingerprint) {
			return stub(true), nil, nil
		}
	}
	var managedFields []byte
	if fingerprint != 0 && d.readsManagedFields != nil && !d.readsManagedFields(string(h.namespace), string(h.name)) {
		// JSON that is not valid fails the whole decode, as before.
		if slim, mf := withoutManagedFields(data); mf != nil && stdjson.Valid(mf) {
			data, managedFields = slim, mf
		}
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, nil, err
	}
	gvk := u.GroupVersionKind()
	if fingerprint != 0 {
		return &fingerprinted{Unstructured: u, fingerprint: fingerprint, managedFields: managedFields}, &gvk, nil
	}
	return u, &gvk, nil
}

// withoutManagedFields returns data without its metadata.managedFields,
// and their JSON, in one new allocation; or data and nil if it has none,
// or its metadata cannot be read. A tracked object is mostly checked and
// stored as a stub, and its managedFields are a tree of small maps for
// every manager that wrote it: the Deployment of testdata decodes in
// 11,856 bytes and 284 allocations without them, against 24,672 and 488,
// and BenchmarkWatchDecode's tracked ConfigMaps in 44 allocations fewer
// each. They are decoded only if the object is stored whole (see
// withManagedFields).
func withoutManagedFields(data []byte) (slim, managedFields []byte) {
	var value []byte
	start, end := -1, -1
	eachField(data, 0, func(k, v []byte) bool {
		if string(k) != "metadata" {
			return true
		}
		eachField(v, 0, func(k, v []byte) bool {
			if string(k) != "managedFields" {
				return true
			}
			// k and v are slices of data: their offsets in it are
			// what their capacities lack of data's.
			value, start, end = v, cap(data)-cap(k)-1, cap(data)-cap(v)+len(v)
			return false
		})
		return false
	})
	if start < 0 {
		return data, nil
	}
	// The field goes with the comma before it, or, first in metadata,
	// with the one after it.
	if i := lastNonSpace(data[:start]); data[i] == ',' {
		start = i
	} else if j := skipSpace(data, end); j < len(data) && data[j] == ',' {
		end = j + 1
	}
	buf := make([]byte, 0, len(data)-(end-start)+len(value))
	buf = append(append(buf, data[:start]...), data[end:]...)
	return buf, append(buf[len(buf):], value...)
}

// lastNonSpace returns the index of the last byte of data that is not
// JSON whitespace; data holds at least one.
func lastNonSpace(data []byte) int {
	i := len(data) - 1
	for data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r' {
		i--
	}
	return i
}

// withManagedFields puts managedFields, the JSON withoutManagedFields
// took out of u and Decode checked, back into u's metadata.
func withManagedFields(u *unstructured.Unstructured, managedFields []byte) {
	var v any
	if utiljson.Unmarshal(managedFields, &v) != nil {
		return // valid JSON decodes
	}
	if meta, ok := u.Object["metadata"].(map[string]any); ok {
		meta["managedFields"] = v
	}
}

func (d *objectDecoder) Encode(runtime.Object, io.Writer) error { return errReadOnly }

func (d *objectDecoder) Identifier() runtime.Identifier { return "helm-locker-watch-object" }

// watchStub carries a Stub through the reflector, which wants a
// runtime.Object; the Registry unwraps it. same marks a tracked object
// whose held fingerprint is the stored stub's: the store keeps what it
// has, and nobody is told.
type watchStub struct {
	Stub
	same bool
}

func (s *watchStub) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *watchStub) DeepCopyObject() runtime.Object { c := *s; return &c }

// eventDecoder splits a framed watch event into its type and the raw
// bytes of its object, which the object decoder reads next.
type eventDecoder struct{}

func (eventDecoder) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return nil, nil, fmt.Errorf("informers: cannot decode a watch event into %T", into)
	}
	var typ, object []byte
	typeOK := true
	if eachField(data, 0, func(key, value []byte) bool {
		switch string(key) {
		case "type":
			typ, typeOK = plainString(value)
		case "object":
			object = value
		}
		return true
	}) < 0 {
		return nil, nil, fmt.Errorf("informers: malformed watch event %.100q", data)
	}
	if !typeOK || typ == nil || object == nil {
		return nil, nil, fmt.Errorf("informers: watch event without a type or an object: %.100q", data)
	}
	event.Type = string(typ)
	event.Object = runtime.RawExtension{Raw: object}
	return event, nil, nil
}

func (eventDecoder) Encode(runtime.Object, io.Writer) error { return errReadOnly }

func (eventDecoder) Identifier() runtime.Identifier { return "helm-locker-watch-event" }

// framer cuts a JSON stream into its top-level values. The API server
// ends every event with a newline, so it reads a line at a time and
// checks that the line holds exactly one value; a value over several
// lines, or lines holding several values, are framed all the same.
type framer struct{}

func (framer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &frameReader{body: r, in: bufio.NewReaderSize(r, 64<<10)}
}

func (framer) NewFrameWriter(w io.Writer) io.Writer { return w }

// frameReader returns one frame per Read, in pieces with
// io.ErrShortBuffer while it does not fit, as streaming.Decoder expects.
type frameReader struct {
	body  io.ReadCloser
	in    *bufio.Reader
	buf   []byte // bytes read and not yet framed start at buf[next]
	next  int
	frame []byte // the frame being returned; frame[off:] is left
	off   int
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.off == len(f.frame) {
		if err := f.advance(); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.frame[f.off:])
	f.off += n
	if f.off < len(f.frame) {
		return n, io.ErrShortBuffer
	}
	return n, nil
}

func (f *frameReader) Close() error { return f.body.Close() }

// advance makes the next value the frame.
func (f *frameReader) advance() error {
	for {
		rest := f.buf[f.next:]
		start := skipSpace(rest, 0)
		if start < len(rest) && rest[start] != '{' {
			return fmt.Errorf("%w: %.20q", errNotAnEvent, rest[start:])
		}
		if end := skipValue(rest, start); end > 0 {
			f.frame, f.off = rest[start:end], 0
			f.next += end
			return nil
		}
		if len(rest)-start > maxFrame {
			return fmt.Errorf("informers: watch event over %d bytes", maxFrame)
		}
		// Keep only what is not framed, then read on.
		f.buf = append(f.buf[:0], rest[start:]...)
		f.next = 0
		line, err := f.in.ReadSlice('\n')
		f.buf = append(f.buf, line...)
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && len(line) > 0:
		case errors.Is(err, io.EOF) && skipSpace(f.buf, 0) < len(f.buf):
			return io.ErrUnexpectedEOF
		default:
			return err
		}
	}
}

package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/engine"
)

// Locks is what the webhook asks of the locks the process holds.
type Locks interface {
	// Prevents reports whether a Prevent lock holds the named object. It
	// is asked first, before either object of the request is decoded.
	Prevents(gvr schema.GroupVersionResource, namespace, name string) bool
	Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (engine.Judgement, error)
	// JudgeScale judges a request to the scale subresource. It may read
	// the object, within ctx, the review's.
	JudgeScale(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error)
	// Confirm is asked before a request is denied, with the key of the
	// lock that holds the object; false lets the request through. A
	// HelmRelease's lock is open while Helm is at work, and the watch
	// that says so can trail Helm's first write.
	Confirm(ctx context.Context, key string) (bool, error)
	// Describe names the lock of key, and says how to change what it
	// holds.
	Describe(key string) (lock, change string)
	// Record records a denial. It is not called for dry runs, which
	// promise to record nothing (sideEffects: NoneOnDryRun).
	Record(key string, d Denial)
}

// Denial is a request the webhook denied.
type Denial struct {
	Judgement engine.Judgement
	// User is the requesting user, as the API server authenticated it.
	User string
	// Operation is the request's, with "/scale" for that subresource.
	Operation string
	Time      time.Time
}

// Identities that write on Kubernetes' behalf: cascading deletion and
// namespace deletion must work whatever is locked.
const (
	GarbageCollector    = "system:serviceaccount:kube-system:generic-garbage-collector"
	NamespaceController = "system:serviceaccount:kube-system:namespace-controller"
)

// Options configure a Handler.
type Options struct {
	// ExemptGroups may change locked objects: a break-glass group.
	ExemptGroups []string
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// Observer, if set, is told of every request answered or shed.
	Observer Observer
	// MaxInFlight bounds the reviews read and judged at once;
	// DefaultMaxInFlight if 0. Past it a request is shed (see ServeHTTP).
	MaxInFlight int
	// MaxBodyRead bounds how long a review's body may take to arrive
	// once it holds one of those slots; DefaultMaxBodyRead if 0.
	MaxBodyRead time.Duration
}

// Observer is told what the webhook does, for metrics.
type Observer interface {
	// Reviewed is told of each request answered but dry runs, which
	// promise to record nothing.
	Reviewed(allowed bool)
	// Answered is told of each request answered, dry runs included: the
	// time since the last one says whether the API server reaches the
	// webhook at all.
	Answered(at time.Time)
	// Shed is told of a request refused unread or let through unjudged,
	// and why: ShedBusy, ShedTooLarge, ShedSlowBody or ShedMismatch.
	Shed(reason string)
}

// Why a request was shed.
const (
	// ShedBusy: MaxInFlight reviews were being answered already.
	ShedBusy = "Busy"
	// ShedTooLarge: the body was over MaxReviewBytes.
	ShedTooLarge = "TooLarge"
	// ShedSlowBody: the body did not arrive within MaxBodyRead.
	ShedSlowBody = "SlowBody"
	// ShedMismatch: the review names an object a lock holds but carries
	// another (MismatchError). The API server never sends one, so it is
	// forged; it is let through unjudged and records nothing.
	ShedMismatch = "Mismatch"
)

// DefaultMaxInFlight bounds the reviews answered at once. One that no lock
// holds is answered from its envelope in well under a millisecond, and one
// that a lock holds in a few milliseconds, so 8 at once serve thousands a
// second. It bounds memory: a review of MaxReviewBytes costs 8 MiB read
// and its objects copied raw (TestHandlerMemory), and decoding the two
// objects of a held one about four times their JSON more, some 24 MiB in
// all; 8 at once stay under 200 MiB, within the chart's 512 MiB limit.
const DefaultMaxInFlight = 8

// DefaultMaxBodyRead bounds how long a review's body may take to arrive
// once the review holds a slot. The API server writes a review whole,
// headers and body at once, so only a client that stalls on purpose comes
// near it: a body of MaxReviewBytes takes 34 ms at 1 Gb/s, and 1 s is room
// for a link 30 times slower. Without it, a client that sends headers and
// then nothing held a slot for the server's whole ReadTimeout (3 s), and 8
// such clients made every real review fail open. A client that keeps
// sending them can still keep the slots busy, each for at most this long:
// the chart's NetworkPolicy is what keeps such clients away.
const DefaultMaxBodyRead = time.Second

// MaxReviewBytes bounds a review's body. etcd refuses an object over
// 1.5 MiB (its default --max-request-bytes), and a review carries two: the
// object as stored and as the request would leave it. Stored as protobuf,
// a built-in object grows by up to a third in JSON (a Secret's data is
// base64), so two at their largest come to 4 MiB, with room for the
// envelope. A larger review could never be stored, and is refused.
const MaxReviewBytes = 2*(3<<20/2)*4/3 + 64<<10

// Handler serves AdmissionReview requests.
type Handler struct {
	locks    func() Locks
	opts     Options
	inFlight chan struct{}
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that asks locks() for the locks held now;
// nil, as on a replica standing by, allows every request.
func NewHandler(locks func() Locks, opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxBodyRead <= 0 {
		opts.MaxBodyRead = DefaultMaxBodyRead
	}
	return &Handler{locks: locks, opts: opts, inFlight: make(chan struct{}, opts.MaxInFlight)}
}

// ServeHTTP answers one AdmissionReview. Past MaxInFlight reviews at once,
// or past MaxReviewBytes, it refuses the request unread with 429 or 413,
// and a body that takes longer than MaxBodyRead with 408:
// the configuration's failurePolicy Ignore lets the request through, as
// "allowed" would, and the API server counts it in its own
// apiserver_admission_webhook_fail_open_count. Answering "allowed" instead
// would need the request's UID, so the very read and parse the bound is
// there to spare. The revert stays the backstop for what gets through.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	select {
	case h.inFlight <- struct{}{}:
		defer func() { <-h.inFlight }()
	default:
		h.shed(ShedBusy)
		http.Error(w, "too many admission reviews at once", http.StatusTooManyRequests)
		return
	}
	review, err := h.readBody(w, r)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		h.shed(ShedTooLarge)
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		h.shed(ShedSlowBody)
		http.Error(w, "the review's body took too long", http.StatusRequestTimeout)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := h.review(r.Context(), review.Request)
	resp.UID = review.Request.UID
	h.observe(review.Request, resp.Allowed)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// readBody reads the review within MaxBodyRead, so that a client that
// stalls holds the slot taken for it no longer than that (see
// DefaultMaxBodyRead). The deadline bounds the body alone: net/http clears
// it once the body is read to its end, before it reads on in the
// background to learn whether the client goes away (HTTP/2 only closes the
// body, read already), so it never cancels the review's context while the
// review is judged. A ResponseWriter that cannot set deadlines (a test's
// recorder) reads without one.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.opts.MaxBodyRead))
	return readReview(w, r)
}

// readReview reads an AdmissionReview of at most MaxReviewBytes. Its
// objects stay raw bytes (runtime.RawExtension keeps what it is given):
// only the envelope is parsed here.
func readReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, error) {
	// Room for the whole body and the read that finds its end: a buffer
	// that fills up grows to twice its size.
	size := int64(bytes.MinRead)
	if r.ContentLength > 0 && r.ContentLength <= MaxReviewBytes {
		size += r.ContentLength
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxReviewBytes)); err != nil {
		return nil, err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(buf.Bytes(), &review); err != nil || review.Request == nil {
		return nil, fmt.Errorf("not an AdmissionReview: %v", err)
	}
	return &review, nil
}

func (h *Handler) shed(reason string) {
	if h.opts.Observer != nil {
		h.opts.Observer.Shed(reason)
	}
}

func (h *Handler) observe(req *admissionv1.AdmissionRequest, allowed bool) {
	if h.opts.Observer == nil {
		return
	}
	h.opts.Observer.Answered(h.opts.Now())
	if req.DryRun == nil || !*req.DryRun {
		h.opts.Observer.Reviewed(allowed)
	}
}

// review decides one request. Whether a lock holds the object is asked
// from the request's resource, namespace and name, before anything else
// is decoded: a request no lock holds, forged or not, costs no decode and
// records nothing.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if probe(req) {
		return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{ProbeWarning}}
	}
	locks := h.locks()
	if locks == nil || h.exempt(req.UserInfo.Username, req.UserInfo.Groups) {
		return allow
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	if req.Name == "" || !locks.Prevents(gvr, req.Namespace, req.Name) {
		return allow
	}
	j, err := judge(ctx, locks, gvr, req)
	if mismatch := (*MismatchError)(nil); errors.As(err, &mismatch) {
		h.shed(ShedMismatch)
	}
	if err != nil || !j.Denied() {
		// Not knowing is no reason to deny: the revert follows.
		return allow
	}
	if open, err := locks.Confirm(ctx, j.Key); err != nil || !open {
		return allow
	}
	operation := string(req.Operation)
	if req.SubResource != "" {
		operation += "/" + req.SubResource
	}
	if req.DryRun == nil || !*req.DryRun {
		locks.Record(j.Key, Denial{Judgement: j, User: req.UserInfo.Username, Operation: operation, Time: h.opts.Now()})
	}
	lock, change := locks.Describe(j.Key)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: message(j, lock, change),
	}}
}

// ProbeWarning is the webhook's answer to the leader's probe (see
// webhook.Probe): the API server hands it back to the request's sender,
// which learns that the API server reached the webhook.
const ProbeWarning = "helm-locker: the admission webhook answered this probe"

// probe reports whether req is the probe: a dry-run create of a Lease,
// which the probe webhook alone sends here. Nothing of it is decoded, and
// answering it records nothing.
func probe(req *admissionv1.AdmissionRequest) bool {
	return req.Operation == admissionv1.Create && req.DryRun != nil && *req.DryRun &&
		req.Resource.Group == "coordination.k8s.io" && req.Resource.Resource == "leases"
}

// judge asks locks about req: the object, or for the scale subresource
// the replicas, before and after. Both objects must be the one the
// request names, which is the one a lock was found to hold.
func judge(ctx context.Context, locks Locks, gvr schema.GroupVersionResource, req *admissionv1.AdmissionRequest) (engine.Judgement, error) {
	old, err := decode(req.OldObject.Raw, req)
	if err != nil {
		return engine.Judgement{}, err
	}
	obj, err := decode(req.Object.Raw, req)
	if err != nil {
		return engine.Judgement{}, err
	}
	switch req.SubResource {
	case "":
		if req.Operation == admissionv1.Delete {
			obj = nil
		}
		return locks.Judge(gvr, old, obj)
	case "scale":
		if old == nil || obj == nil {
			return engine.Judgement{}, nil
		}
		before, _, _ := unstructured.NestedInt64(old.Object, "spec", "replicas")
		after, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		return locks.JudgeScale(ctx, gvr, req.Namespace, req.Name, before, after)
	default:
		// Status and other subresources are not the lock's.
		return engine.Judgement{}, nil
	}
}

// decode decodes one object of req, which must be the object req names.
func decode(raw []byte, req *admissionv1.AdmissionRequest) (*unstructured.Unstructured, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("review %s of %s %s/%s: %w", req.UID, req.Resource.Resource, req.Namespace, req.Name, err)
	}
	if u.GetName() != req.Name || u.GetNamespace() != req.Namespace {
		return nil, &MismatchError{Request: req.Namespace + "/" + req.Name, Object: u.GetNamespace() + "/" + u.GetName()}
	}
	return u, nil
}

// MismatchError is a review whose object is not the one its request names:
// never sent by the API server, and never judged.
type MismatchError struct{ Request, Object string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("the review names %s but carries the object %s", e.Request, e.Object)
}

// exempt reports whether a user may change locked objects whatever the
// lock says: Kubernetes' own deleters, and the break-glass groups. Nobody
// else is let through by who they are; the locker's own writes pass by
// making objects as declared.
func (h *Handler) exempt(user string, groups []string) bool {
	if user == GarbageCollector || user == NamespaceController {
		return true
	}
	return slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(h.opts.ExemptGroups, g) })
}

// message is the denial a user reads: the object, the lock, each field
// with its declared value (a Secret's data by its path only, see
// engine.DeniedField.Redacted), and how to change it, in a line or two.
func message(j engine.Judgement, lock, change string) string {
	object := j.Kind + " " + j.Ref.Name
	if j.Ref.Namespace != "" {
		object = j.Kind + " " + j.Ref.Namespace + "/" + j.Ref.Name
	}
	if j.Deleted {
		return fmt.Sprintf("%s is locked by %s and may not be deleted; to remove it: %s", object, lock, change)
	}
	const shown = 4
	var fields []string
	for i, f := range j.Fields {
		if i == shown {
			fields = append(fields, fmt.Sprintf("and %d more", len(j.Fields)-shown))
			break
		}
		if f.Redacted {
			fields = append(fields, f.Path+" must stay as declared (a Secret's value is not shown)")
			continue
		}
		if f.Declared == nil {
			fields = append(fields, f.Path+" is not declared")
			continue
		}
		fields = append(fields, f.Path+" must stay "+value(f.Declared))
	}
	return fmt.Sprintf("%s is locked by %s: %s; to change it: %s", object, lock, strings.Join(fields, ", "), change)
}

// value prints a declared value, cut short.
func value(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 60
	if s := string(data); len(s) > max {
		return s[:max] + "…"
	}
	return string(data)
}

package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	Judge(gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) (engine.Judgement, error)
	JudgeScale(gvr schema.GroupVersionResource, namespace, name string, oldReplicas, replicas int64) (engine.Judgement, error)
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
	// Reviewed, if set, is told of every request answered but dry runs,
	// which promise to record nothing.
	Reviewed func(allowed bool)
}

// Handler serves AdmissionReview requests.
type Handler struct {
	locks func() Locks
	opts  Options
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that asks locks() for the locks held now;
// nil, as on a replica standing by, allows every request.
func NewHandler(locks func() Locks, opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{locks: locks, opts: opts}
}

// maxReview bounds a request's body; the API server's own limit on an
// object is 3 MiB, and a review carries two.
const maxReview = 8 << 20

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.review(r.Context(), review.Request)
	resp.UID = review.Request.UID
	if dryRun := review.Request.DryRun; h.opts.Reviewed != nil && (dryRun == nil || !*dryRun) {
		h.opts.Reviewed(resp.Allowed)
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// review decides one request.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	locks := h.locks()
	if locks == nil || h.exempt(req.UserInfo.Username, req.UserInfo.Groups) {
		return allow
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	j, err := judge(locks, gvr, req)
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

// judge asks locks about req: the object, or for the scale subresource
// the replicas, before and after.
func judge(locks Locks, gvr schema.GroupVersionResource, req *admissionv1.AdmissionRequest) (engine.Judgement, error) {
	old, err := decode(req.OldObject.Raw)
	if err != nil {
		return engine.Judgement{}, err
	}
	obj, err := decode(req.Object.Raw)
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
		return locks.JudgeScale(gvr, req.Namespace, req.Name, before, after)
	default:
		// Status and other subresources are not the lock's.
		return engine.Judgement{}, nil
	}
}

func decode(raw []byte) (*unstructured.Unstructured, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	return u, nil
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

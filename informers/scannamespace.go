package informers

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// ErrNoScan says a Registry cannot scan: it was built without
// Options.Config, so it has no watch path of its own. The caller lists.
var ErrNoScan = errors.New("informers: scanning needs Options.Config")

// Scanned is what Scan read of a namespace: the objects it kept, by name,
// and how far it read.
type Scanned struct {
	// Objects are the objects keep wanted, decoded in full.
	Objects map[string]*unstructured.Unstructured
	// Seen counts every object read, kept or not.
	Seen int
	// Complete says every object of the namespace was read: a name keep
	// wanted that is not in Objects does not exist.
	Complete bool
}

// Scan reads the objects of gvr in namespace ("" for a cluster-scoped
// type) as they are now, as the informers read a type at start: a watch
// that sends the current objects first (sendInitialEvents), its events
// framed and split by the Registry's scanner, and only the objects keep
// names decoded in full; the others are read as far as their name. It
// stops at the end of the current objects (Complete), or once more, told
// of each object read (its name, and whether it was kept), says to stop: a
// namespace that holds many more objects of the type than a caller needs
// is read only that far.
//
// It is the read-ahead of a caller whose objects an informer dropped
// (they were untracked at its last event): a list of the namespace would
// decode every object in it, and most are not the caller's. A Registry
// without Options.Config returns ErrNoScan; an API server that refuses
// the watch returns its error, and the caller lists instead.
func (r *Registry) Scan(ctx context.Context, gvr schema.GroupVersionResource, namespace string, keep func(name string) bool, more func(name string, kept bool) bool) (Scanned, error) {
	if r.watches == nil {
		return Scanned{}, ErrNoScan
	}
	r.scannedObjects(gvr, scanCost)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := &objectDecoder{tracked: func(_, name string) bool { return keep(name) }}
	w, err := r.watches.watchIn(ctx, gvr, namespace, d, metav1.ListOptions{
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return Scanned{}, err
	}
	defer w.Stop()
	out := Scanned{Objects: map[string]*unstructured.Unstructured{}}
	// Counted when it begins, so that scans at once see each other
	// (see Relist), and made up for once it ends.
	defer func() { r.scannedObjects(gvr, max(0, out.Seen-scanCost)) }()
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, fmt.Errorf("informers: the scan of %s in %q ended before its current objects did", gvr, namespace)
			}
			switch ev.Type {
			case watch.Error:
				if status, ok := ev.Object.(*metav1.Status); ok {
					return out, &statusError{status: *status}
				}
				return out, fmt.Errorf("informers: the scan of %s in %q failed", gvr, namespace)
			case watch.Bookmark:
				if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					out.Complete = true
					return out, nil
				}
				continue
			case watch.Added:
			default:
				// Only the current objects are read: a change after
				// them reaches the informer, as any event does.
				continue
			}
			out.Seen++
			var name string
			kept := true
			switch obj := ev.Object.(type) {
			case *fingerprinted:
				name = obj.GetName()
				out.Objects[name] = obj.Unstructured
			case *unstructured.Unstructured:
				name = obj.GetName()
				out.Objects[name] = obj
			case *watchStub:
				name, kept = obj.GetName(), false
			}
			if more != nil && !more(name, kept) {
				return out, nil
			}
		}
	}
}

// statusError is the API server's Status of a failed scan, as an error
// apierrors reads.
type statusError struct{ status metav1.Status }

func (e *statusError) Error() string { return e.status.Message }

// Status is what apierrors.APIStatus reads.
func (e *statusError) Status() metav1.Status { return e.status }

package events

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// Why an event was not written, as Options.Dropped is told.
const (
	// DropQueueFull: Options.MaxQueued events were waiting already.
	DropQueueFull = "QueueFull"
	// DropRateLimited: the correlator's limit on one object's events
	// (client-go's, 25 at once and then one every 5 minutes).
	DropRateLimited = "RateLimited"
	// DropRejected: the API server refused the event for good.
	DropRejected = "Rejected"
	// DropUnreachable: every try failed to reach the API server.
	DropUnreachable = "Unreachable"
	// DropInvalid: the object has no reference, or the type is not
	// Normal or Warning.
	DropInvalid = "Invalid"
	// DropShutdown: the recorder stopped before the event was written.
	DropShutdown = "Shutdown"
)

// Options tunes a Recorder; the zero value takes the defaults.
type Options struct {
	// Writers is how many events are written at once, each object's in
	// order by one writer. Default 8.
	Writers int
	// MaxQueued bounds the events waiting to be written, about a
	// kilobyte each. Default 20,000: five a release at a cold start of
	// 4,000 releases.
	MaxQueued int
	// Tries is how many times an event is sent while the API server
	// cannot be reached, RetryDelay apart. Defaults 12 and 10 s, as
	// client-go's broadcaster.
	Tries      int
	RetryDelay time.Duration
	// Drain is how long Run keeps writing what is queued once its
	// context ends. Default 5 s.
	Drain time.Duration
	// Correlator configures the folding and limiting of repeats.
	Correlator record.CorrelatorOptions
	// Dropped, if set, is called for each event not written, with one
	// of the Drop reasons.
	Dropped func(reason string)
}

func (o Options) withDefaults() Options {
	if o.Writers <= 0 {
		o.Writers = 8
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = 20000
	}
	if o.Tries <= 0 {
		o.Tries = 12
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 10 * time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Second
	}
	if o.Dropped == nil {
		o.Dropped = func(string) {}
	}
	return o
}

// Recorder is a record.EventRecorder whose events are written by Run.
// Events recorded before Run starts wait for it.
type Recorder struct {
	client     typedcorev1.EventsGetter
	scheme     *runtime.Scheme
	source     corev1.EventSource
	opts       Options
	correlator *record.EventCorrelator

	mu      sync.Mutex
	queues  [][]*corev1.Event // one per writer
	wake    []chan struct{}   // one per writer, signalled when its queue grows
	queued  int
	stopped bool
}

var _ record.EventRecorder = (*Recorder)(nil)

// NewRecorder returns a Recorder writing through client, naming objects
// by scheme's types and itself by source. It does no I/O.
func NewRecorder(client typedcorev1.EventsGetter, scheme *runtime.Scheme, source corev1.EventSource, opts Options) *Recorder {
	opts = opts.withDefaults()
	r := &Recorder{
		client: client, scheme: scheme, source: source, opts: opts,
		correlator: record.NewEventCorrelatorWithOptions(opts.Correlator),
		queues:     make([][]*corev1.Event, opts.Writers),
		wake:       make([]chan struct{}, opts.Writers),
	}
	for i := range r.wake {
		r.wake[i] = make(chan struct{}, 1)
	}
	return r
}

// Event records an event on obj.
func (r *Recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.record(obj, nil, eventtype, reason, message)
}

// Eventf records an event on obj, its message formatted.
func (r *Recorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.record(obj, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf records an event on obj with annotations.
func (r *Recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.record(obj, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) record(obj runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(r.scheme, obj)
	if err != nil || !util.ValidateEventType(eventtype) {
		r.opts.Dropped(DropInvalid)
		return
	}
	r.enqueue(newEvent(ref, annotations, eventtype, reason, message, r.source))
}

// newEvent is the event client-go's recorder makes.
func newEvent(ref *corev1.ObjectReference, annotations map[string]string, eventtype, reason, message string, source corev1.EventSource) *corev1.Event {
	t := metav1.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        util.GenerateEventName(ref.Name, t.UnixNano()),
			Namespace:   namespace,
			Annotations: annotations,
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                eventtype,
		Source:              source,
		ReportingController: source.Component,
		ReportingInstance:   source.Host,
	}
}

// enqueue queues ev for the writer of its object, so that one object's
// events are correlated and written in the order they were recorded.
func (r *Recorder) enqueue(ev *corev1.Event) {
	h := fnv.New32a()
	o := ev.InvolvedObject
	for _, s := range []string{o.APIVersion, o.Kind, o.Namespace, o.Name, string(o.UID)} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	w := int(h.Sum32() % uint32(len(r.queues)))
	r.mu.Lock()
	switch {
	case r.stopped:
		r.mu.Unlock()
		r.opts.Dropped(DropShutdown)
		return
	case r.queued >= r.opts.MaxQueued:
		r.mu.Unlock()
		r.opts.Dropped(DropQueueFull)
		return
	}
	r.queues[w] = append(r.queues[w], ev)
	r.queued++
	r.mu.Unlock()
	select {
	case r.wake[w] <- struct{}{}:
	default:
	}
}

// next takes writer w's next event, or nil if it has none.
func (r *Recorder) next(w int) *corev1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[w]
	if len(q) == 0 {
		return nil
	}
	ev := q[0]
	q[0] = nil
	if len(q) == 1 {
		q = q[:0] // reuse the backing array
	} else {
		q = q[1:]
	}
	r.queues[w] = q
	r.queued--
	return ev
}

// Run writes the recorded events until ctx ends, then for up to
// Options.Drain what is still queued, and returns once every writer has.
// Events recorded after it returns are dropped.
func (r *Recorder) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	drainCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(r.opts.Drain, cancel)
	})
	defer stop()
	var wg sync.WaitGroup
	for w := range r.queues {
		wg.Go(func() { r.write(ctx, drainCtx, logger, w) })
	}
	wg.Wait()
	r.mu.Lock()
	r.stopped = true
	dropped := r.queued
	r.queued = 0
	for w := range r.queues {
		r.queues[w] = nil
	}
	r.mu.Unlock()
	for range dropped {
		r.opts.Dropped(DropShutdown)
	}
}

// write is writer w's loop: it writes while ctx lasts, and then drains its
// queue, with no retries, while drain lasts.
func (r *Recorder) write(ctx, drain context.Context, logger klog.Logger, w int) {
	for {
		ev := r.next(w)
		if ev == nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
			case <-r.wake[w]:
			}
			continue
		}
		if drain.Err() != nil {
			r.opts.Dropped(DropShutdown)
			continue
		}
		r.deliver(ctx, drain, logger, ev)
	}
}

// deliver correlates ev with the events before it and writes it, trying
// again while the API server cannot be reached.
func (r *Recorder) deliver(ctx, drain context.Context, logger klog.Logger, ev *corev1.Event) {
	result, err := r.correlator.EventCorrelate(ev)
	if err != nil {
		logger.Error(err, "Could not correlate event", "event", klog.KObj(ev))
	}
	if result.Skip {
		r.opts.Dropped(DropRateLimited)
		return
	}
	for try := 1; ; try++ {
		err := r.send(drain, result.Event, result.Patch)
		if err == nil {
			return
		}
		if permanent(err) {
			if !apierrors.IsAlreadyExists(err) && !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				logger.Error(err, "The API server refused an event", "event", klog.KObj(result.Event), "reason", result.Event.Reason)
			}
			r.opts.Dropped(DropRejected)
			return
		}
		if try >= r.opts.Tries || ctx.Err() != nil {
			logger.Error(err, "Could not write an event", "event", klog.KObj(result.Event), "reason", result.Event.Reason, "tries", try)
			r.opts.Dropped(DropUnreachable)
			return
		}
		// The first wait is random, so that replicas that lost the API
		// server together do not all come back at once.
		delay := r.opts.RetryDelay
		if try == 1 {
			delay = time.Duration(rand.Int64N(int64(delay)) + 1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// send writes ev: a patch of the event it repeats, or one of its own.
func (r *Recorder) send(ctx context.Context, ev *corev1.Event, patch []byte) error {
	events := r.client.Events(ev.Namespace)
	var written *corev1.Event
	var err error
	if ev.Count > 1 {
		written, err = events.Patch(ctx, ev.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	if ev.Count <= 1 || apierrors.IsNotFound(err) {
		// The event it repeats is gone (events expire after an hour).
		ev.ResourceVersion = ""
		written, err = events.Create(ctx, ev, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	// The correlator keeps the name and version the API server gave.
	r.correlator.UpdateState(written)
	return nil
}

// permanent says an error will come back however often the event is sent.
func permanent(err error) bool {
	var status apierrors.APIStatus
	var construction *rest.RequestConstructionError
	switch {
	case errors.As(err, &construction):
		return true
	case errors.As(err, &status):
		// Like client-go, try again only where the API server may not
		// have answered itself.
		code := status.Status().Code
		return code != 0 && code < 500 && code != 429 && code != 408
	}
	return false
}

package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// The flags' defaults.
const (
	leaseDuration = 12 * time.Second
	renewDeadline = 11 * time.Second
	retryPeriod   = 10 * time.Second
)

// driver runs an Elector on a fake clock and a fake API server, and lets a
// test move it one step at a time: each step changes the world (the clock,
// the Lease, the work), then waits until the elector has acted on it and
// blocks again, or Run has returned.
type driver struct {
	t       *testing.T
	api     *fakeAPI
	clock   *testingclock.FakeClock
	cancel  context.CancelFunc
	blocked chan struct{}
	done    chan error
	// started receives the work's context when it starts; finish makes
	// the work return.
	started chan context.Context
	finish  chan error
	// drains makes the work, once cancelled, wait for finish before it
	// returns, as a controller finishing its syncs would.
	drains atomic.Bool
	// workEnded is set as the work returns; releasedEarly if the Lease
	// was released before that.
	workEnded, releasedEarly atomic.Bool
	result                   *error
	leadCtx                  context.Context
	// busy is what Config.Busy says, when the test gives it one.
	busy atomic.Bool
}

// startDriver runs an Elector named "me" with the default flags against a
// fake API server holding initial, after setup (if any) has prepared it.
// With busyKnown, the Elector asks the driver whether the work is busy.
func startDriver(t *testing.T, initial *coordinationv1.Lease, setup func(*fakeAPI), busyKnown bool) *driver {
	t.Helper()
	d := &driver{
		t:       t,
		api:     newFakeAPI(t, initial),
		clock:   testingclock.NewFakeClock(t0),
		blocked: make(chan struct{}),
		done:    make(chan error, 1),
		started: make(chan context.Context, 1),
		finish:  make(chan error, 1),
	}
	if setup != nil {
		setup(d.api)
	}
	d.api.PrependReactor("update", "leases", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if holderOf(action.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)) == "" && !d.workEnded.Load() {
			d.releasedEarly.Store(true)
		}
		return false, nil, nil
	})
	cfg := Config{
		Leases: d.api.CoordinationV1(), Namespace: "ns", Name: "locker", Identity: "me",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: d.clock,
		Readiness: d.api,
	}
	if busyKnown {
		cfg.Busy = d.busy.Load
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.waiting = func(ctx context.Context) {
		select {
		case d.blocked <- struct{}{}:
		case <-ctx.Done():
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	t.Cleanup(func() {
		cancel()
		if d.result == nil {
			<-d.done
		}
	})
	go func() {
		d.done <- e.Run(ctx, func(ctx context.Context) error {
			d.started <- ctx
			var err error
			select {
			case <-ctx.Done():
				if d.drains.Load() {
					err = <-d.finish
				}
			case err = <-d.finish:
			}
			d.workEnded.Store(true)
			return err
		})
	}()
	d.settle()
	return d
}

// settle waits until the elector blocks again or Run returns. The time
// limit only keeps a broken elector from hanging the test binary.
func (d *driver) settle() {
	d.t.Helper()
	select {
	case <-d.blocked:
	case err := <-d.done:
		d.result = &err
	case <-time.After(30 * time.Second):
		d.t.Fatal("the elector neither blocked nor returned")
	}
}

// leading reports whether the work runs. The work starts on a goroutine
// of its own, maybe after the elector blocks, so when it is expected to
// run, leading waits for it to start.
func (d *driver) leading(expected bool) bool {
	d.t.Helper()
	if d.leadCtx == nil && expected {
		select {
		case d.leadCtx = <-d.started:
		case <-time.After(30 * time.Second):
			d.t.Fatal("the work did not start")
		}
	}
	if d.leadCtx == nil {
		select {
		case d.leadCtx = <-d.started:
		default:
		}
	}
	return d.leadCtx != nil && d.leadCtx.Err() == nil
}

// requests lists the verbs the elector sent since the last call.
func (d *driver) requests() []string {
	var verbs []string
	for _, a := range d.api.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	d.api.ClearActions()
	return verbs
}

// A step is one change to the elector's world and what must follow.
type step struct {
	do func(d *driver)
	// quiet steps do not wake the elector, so nothing is waited for.
	quiet bool
	// What must hold after the step: the Lease's holder ("-" for no
	// Lease), whether the work runs, and the requests the step caused.
	holder   string
	leading  bool
	requests []string
	// returned, if set, is what Run must have returned, by substring;
	// "nil" for no error. lost is the same for an error that wraps
	// ErrLost.
	returned, lost string
}

func advance(by time.Duration) func(*driver) { return func(d *driver) { d.clock.Step(by) } }

// repeat returns n copies of s.
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// otherRenews is the other replica renewing the Lease it holds.
func otherRenews(d *driver) {
	d.api.put(d.t, leaseHeldBy("other", d.clock.Now(), 12))
}

func otherReleases(d *driver) {
	d.api.put(d.t, released(leaseHeldBy("other", t0, 12), d.clock.Now()))
}

func failUpdates(d *driver) {
	d.api.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
}

func TestElector(t *testing.T) {
	heldByOther := leaseHeldBy("other", t0, 12)
	leading := step{holder: "me", leading: true, requests: []string{"get", "create"}}
	for _, tc := range []struct {
		name    string
		initial *coordinationv1.Lease
		setup   func(*fakeAPI)
		// busyKnown gives the elector Config.Busy, which says what
		// the driver's busy holds (false until a step sets it).
		busyKnown bool
		// first is what must hold once Run first blocks.
		first step
		steps []step
	}{
		{
			name:  "no Lease: creates it and leads",
			first: leading,
		},
		{
			name:  "leading: one Update per retry period and no other request",
			first: leading,
			steps: []step{
				{do: advance(retryPeriod - time.Millisecond), quiet: true, holder: "me", leading: true},
				{do: advance(time.Millisecond), holder: "me", leading: true, requests: []string{"update"}},
				{do: advance(retryPeriod), holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			// The early looks cost no request.
			name:      "idle work: one Update per retry period, however often the elector looks",
			busyKnown: true,
			first:     leading,
			steps: append(append([]step{
				{do: advance(retryPeriod/2 - time.Millisecond), quiet: true, holder: "me", leading: true},
				{do: advance(time.Millisecond), holder: "me", leading: true},
			}, repeat(busyLooks/2-1, step{do: advance(retryPeriod / busyLooks), holder: "me", leading: true})...),
				step{do: advance(retryPeriod / busyLooks), holder: "me", leading: true, requests: []string{"update"}},
			),
		},
		{
			// A renewal slowed by the load has until the deadline,
			// 6 s rather than 1 s, to be answered.
			name:      "busy work: renews at the first look from half the retry period on that finds it busy",
			busyKnown: true,
			first:     leading,
			steps: []step{
				{do: func(d *driver) { d.busy.Store(true); d.clock.Step(retryPeriod/2 - time.Millisecond) }, quiet: true, holder: "me", leading: true},
				{do: advance(time.Millisecond), holder: "me", leading: true, requests: []string{"update"}},
				{do: func(d *driver) { d.busy.Store(false); d.clock.Step(retryPeriod / 2) }, holder: "me", leading: true},
				{do: func(d *driver) { d.busy.Store(true); d.clock.Step(retryPeriod / busyLooks) }, holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			name:    "held by another: watches it and waits a lease duration from its last renewal as seen here",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps: []step{
				{do: advance(11 * time.Second), quiet: true, holder: "other"},
				{do: otherRenews, holder: "other"},
				// 22 s after the first sight, 11 s after the renewal.
				{do: advance(11 * time.Second), quiet: true, holder: "other"},
				{do: advance(time.Second), holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			// A Lease renewed an hour ago by the holder's clock is
			// still waited on for a full lease duration: the clocks
			// may disagree, and a standby that starts long after a
			// renewal it did not see cannot know it is old.
			name:    "renewTime from a skewed clock is not trusted",
			initial: leaseHeldBy("other", t0.Add(-time.Hour), 12),
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps: []step{
				{do: advance(leaseDuration - time.Millisecond), quiet: true, holder: "other"},
				{do: advance(time.Millisecond), holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			name:    "released by the leader: takes it at once",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps:   []step{{do: otherReleases, holder: "me", leading: true, requests: []string{"update"}}},
		},
		{
			name:    "deleted: creates it at once",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps:   []step{{do: func(d *driver) { d.api.remove(d.t) }, holder: "me", leading: true, requests: []string{"create"}}},
		},
		{
			// The watch has not delivered a renewal when the Lease
			// seems to expire: the takeover's Update carries the old
			// resourceVersion and fails, and the standby waits a full
			// duration from the renewal it then reads.
			name:    "a renewal not yet seen wins over the takeover",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps: []step{
				{do: func(d *driver) { d.api.stall(); d.api.closeWatches() }, holder: "other"},
				{do: advance(retryPeriod), holder: "other", requests: []string{"watch"}},
				{do: otherRenews, quiet: true, holder: "other"},
				{do: advance(leaseDuration - retryPeriod), holder: "other", requests: []string{"update", "get"}},
				{do: advance(leaseDuration - time.Millisecond), quiet: true, holder: "other"},
				{do: advance(time.Millisecond), holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			name:    "a watch that ends is opened again once a retry period has passed since the last",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps: []step{
				{do: func(d *driver) { d.api.closeWatches() }, holder: "other"},
				{do: advance(retryPeriod), holder: "other", requests: []string{"watch"}},
				{do: otherReleases, holder: "me", leading: true, requests: []string{"update"}},
			},
		},
		{
			// A refusal that is no outage (a 429 or 5xx is one, and
			// waits for readiness instead; see the next cases).
			name:    "a failed read is retried after a retry period",
			initial: heldByOther,
			setup: func(api *fakeAPI) {
				failed := false
				api.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
					if failed {
						return false, nil, nil
					}
					failed = true
					return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "locker", errors.New("not yet bound"))
				})
			},
			first: step{holder: "other", requests: []string{"get"}},
			steps: []step{
				{do: advance(retryPeriod - time.Millisecond), quiet: true, holder: "other"},
				{do: advance(time.Millisecond), holder: "other", requests: []string{"get", "watch"}},
			},
		},
		{
			name:  "cannot renew: stops the work at the renew deadline, before the Lease expires",
			first: leading,
			steps: []step{
				{do: func(d *driver) { failUpdates(d); d.clock.Step(retryPeriod) }, holder: "me", leading: true, requests: []string{"update"}},
				{do: advance(renewRetry), holder: "me", leading: true, requests: []string{"update"}},
				{do: advance(renewRetry), holder: "me", leading: true, requests: []string{"update"}},
				{do: advance(renewRetry), holder: "me", leading: true, requests: []string{"update"}},
				{do: advance(renewDeadline - retryPeriod - 3*renewRetry), holder: "me", lost: "not renewed within 11s"},
			},
		},
		{
			name:  "another replica took the Lease: stops leading at once",
			first: leading,
			steps: []step{
				{do: otherRenews, quiet: true, holder: "other", leading: true},
				{do: advance(retryPeriod), holder: "other", requests: []string{"update", "get"}, lost: `it names "other"`},
			},
		},
		{
			// A renewal that timed out here may have been written
			// there; the next one conflicts, finds the Lease still
			// this replica's, and renews from what it read.
			name:  "a renewal that landed unseen: renews from the Lease as read",
			first: leading,
			steps: []step{
				{do: func(d *driver) { d.api.put(d.t, leaseHeldBy("me", d.clock.Now(), 12)) }, quiet: true, holder: "me", leading: true},
				{do: advance(retryPeriod), holder: "me", leading: true, requests: []string{"update", "get", "update"}},
			},
		},
		{
			name:  "stopped: the work ends, then the Lease is released",
			first: leading,
			steps: []step{
				{do: func(d *driver) { d.drains.Store(true); d.cancel() }, quiet: true, holder: "me"},
				{do: func(d *driver) { d.finish <- nil }, holder: "", requests: []string{"update"}, returned: "nil"},
			},
		},
		{
			name:  "the work fails: the Lease is released and the error returned",
			first: leading,
			steps: []step{{do: func(d *driver) { d.finish <- errors.New("caches did not sync") }, holder: "", requests: []string{"update"}, returned: "caches did not sync"}},
		},
		{
			// After an outage, the standby asks again as soon as the
			// API server is ready, not a retry period after its last
			// failure; and while the API server says it is ready
			// but requests still fail, it waits a retry period.
			name:    "API server down: asks again once it is ready",
			initial: heldByOther,
			setup:   func(f *fakeAPI) { f.down.Store(true) },
			first:   step{holder: "other", requests: []string{"get"}},
			steps: []step{
				{do: advance(readinessPoll), holder: "other"},
				{do: func(d *driver) { d.api.down.Store(false); d.clock.Step(readinessPoll) }, holder: "other", requests: []string{"get", "watch"}},
			},
		},
		{
			name:    "API server ready but failing: waits a retry period",
			initial: heldByOther,
			setup: func(f *fakeAPI) {
				f.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				})
			},
			first: step{holder: "other", requests: []string{"get"}},
			steps: []step{
				// Asked again once the API server says it is
				// ready; then not for a retry period.
				{do: advance(readinessPoll), holder: "other", requests: []string{"get"}},
				{do: advance(retryPeriod - time.Millisecond), quiet: true, holder: "other"},
				{do: advance(time.Millisecond), holder: "other", requests: []string{"get"}},
			},
		},
		{
			name:    "stopped while standing by: returns without writing",
			initial: heldByOther,
			first:   step{holder: "other", requests: []string{"get", "watch"}},
			steps:   []step{{do: func(d *driver) { d.cancel() }, holder: "other", returned: "nil"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDriver(t, tc.initial, tc.setup, tc.busyKnown)
			d.check("at start", tc.first)
			for i, s := range tc.steps {
				s.do(d)
				if !s.quiet {
					d.settle()
				}
				d.check(fmt.Sprintf("after step %d", i+1), s)
			}
		})
	}
}

func (d *driver) check(when string, s step) {
	d.t.Helper()
	holder := "-"
	if lease := d.api.lease(d.t); lease != nil {
		holder = holderOf(lease)
	}
	if holder != s.holder {
		d.t.Errorf("%s: the Lease names %q, want %q", when, holder, s.holder)
	}
	if got := d.leading(s.leading); got != s.leading {
		d.t.Errorf("%s: leading = %v, want %v", when, got, s.leading)
	}
	if diff := cmp.Diff(s.requests, d.requests()); diff != "" {
		d.t.Errorf("%s: requests (-want +got):\n%s", when, diff)
	}
	want := s.returned
	if s.lost != "" {
		want = s.lost
	}
	switch {
	case want == "" && d.result != nil:
		d.t.Fatalf("%s: Run returned %v, want it still running", when, *d.result)
	case want == "":
		return
	case d.result == nil:
		d.t.Fatalf("%s: Run has not returned, want %q", when, want)
	case want == "nil" && *d.result != nil:
		d.t.Errorf("%s: Run returned %v, want nil", when, *d.result)
	case want != "nil" && (*d.result == nil || !strings.Contains((*d.result).Error(), want)):
		d.t.Errorf("%s: Run returned %v, want an error containing %q", when, *d.result, want)
	case (s.lost != "") != errors.Is(*d.result, ErrLost):
		d.t.Errorf("%s: Run returned %v; errors.Is(ErrLost) = %v, want %v", when, *d.result, !(s.lost != ""), s.lost != "")
	}
	if d.leadCtx == nil {
		return
	}
	// Run returns only once the work has, and releases the Lease only
	// after that, so that two leaders never write at once.
	if !d.workEnded.Load() {
		d.t.Errorf("%s: Run returned before the work did", when)
	}
	if d.releasedEarly.Load() {
		d.t.Errorf("%s: the Lease was released before the work ended", when)
	}
}

func TestNewChecksTheDurations(t *testing.T) {
	valid := Config{
		Leases: newFakeAPI(t, nil).CoordinationV1(), Namespace: "ns", Name: "locker", Identity: "me",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // "" for valid
	}{
		{"the flags' defaults", func(*Config) {}, ""},
		{"client-go's defaults", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
		}, ""},
		{"no identity", func(c *Config) { c.Identity = "" }, "empty identity"},
		{"no Lease name", func(c *Config) { c.Name = "" }, "namespace and a name"},
		{"no retry period", func(c *Config) { c.RetryPeriod = 0 }, "must be positive"},
		{"a deadline before the first renewal", func(c *Config) { c.RenewDeadline = c.RetryPeriod }, "longer than the retry period"},
		{"a lease that ends before the deadline", func(c *Config) { c.LeaseDuration = c.RenewDeadline }, "longer than the renew deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.change(&cfg)
			_, err := New(cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("New: %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// ErrLost is returned by Run when the Lease was lost while leading: another
// replica took it, or it could not be renewed before the renew deadline.
var ErrLost = errors.New("lost the leader Lease")

// Config is what an Elector needs.
type Config struct {
	// Leases reads, watches and writes the Lease.
	Leases coordinationv1client.LeasesGetter
	// Namespace and Name name the Lease.
	Namespace, Name string
	// Identity names this replica in the Lease's holderIdentity. It must
	// be unique among the replicas, and new for every process.
	Identity string
	// LeaseDuration is how long a standby waits, from when it saw the
	// Lease last renewed, before taking it. Written into the Lease in
	// whole seconds, rounded up.
	LeaseDuration time.Duration
	// RenewDeadline is how long after its last successful renewal the
	// leader stops leading if it cannot renew. Shorter than LeaseDuration,
	// so the leader stops before a standby may take over.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews, and how long a standby
	// waits before asking again after a failed request.
	RetryPeriod time.Duration
	// Busy, if set, reports whether the work is sending requests. While
	// it is, the leader renews from half the retry period on rather than
	// at it: the API server is then loaded, by this replica's writes and
	// perhaps by a storm of someone else's, and a renewal sent at the
	// retry period has only RenewDeadline minus RetryPeriod (1 s with the
	// default flags) to be answered before the leader must stop. Idle,
	// the leader renews once a retry period, its only request. Busy is
	// called every tenth of a retry period from the half on, so it must
	// be cheap.
	Busy func() bool
	// Clock is the clock timers and expiry are measured on; nil is the
	// real clock.
	Clock clock.WithTicker
	// Readiness, if set, lets a standby whose requests failed because the
	// API server was unavailable ask again as soon as it is ready, rather
	// than a retry period later: after an outage that ended a term, the
	// Lease is taken, and the lock resumes, within a readiness probe of
	// the API server's return.
	Readiness Readiness
}

// Readiness says whether the API server is ready to serve; see
// informers.Probe.
type Readiness interface {
	Ready(ctx context.Context) bool
}

// renewRetry is how soon the leader tries again after a failed renewal.
// Failures are mostly quick (connection refused, 5xx), and the default
// flags leave one second between an idle leader's renewal and the
// deadline: four tries without hammering an API server in trouble.
const renewRetry = 250 * time.Millisecond

// busyLooks is how many times a retry period the leader asks Config.Busy,
// from the period's half on, whether to renew early.
const busyLooks = 10

// Elector runs a function while this replica holds the Lease.
type Elector struct {
	cfg    Config
	leases coordinationv1client.LeaseInterface
	clock  clock.WithTicker
	// waiting, if set (by tests), is called each time Run is about to
	// block, so that a test can drive it one step at a time.
	waiting func(ctx context.Context)
}

// New checks cfg and returns an Elector. It does no I/O.
func New(cfg Config) (*Elector, error) {
	switch {
	case cfg.Leases == nil:
		return nil, errors.New("leader election: no Lease client")
	case cfg.Namespace == "" || cfg.Name == "":
		return nil, errors.New("leader election: the Lease needs a namespace and a name")
	case cfg.Identity == "":
		return nil, errors.New("leader election: empty identity")
	case cfg.RetryPeriod <= 0:
		return nil, fmt.Errorf("leader election: retry period %s must be positive", cfg.RetryPeriod)
	case cfg.RenewDeadline <= cfg.RetryPeriod:
		return nil, fmt.Errorf("leader election: renew deadline %s must be longer than the retry period %s, or the leader gives up before it renews", cfg.RenewDeadline, cfg.RetryPeriod)
	case cfg.LeaseDuration <= cfg.RenewDeadline:
		return nil, fmt.Errorf("leader election: lease duration %s must be longer than the renew deadline %s, so that a leader that cannot renew stops before another takes over", cfg.LeaseDuration, cfg.RenewDeadline)
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	return &Elector{cfg: cfg, leases: cfg.Leases.Leases(cfg.Namespace), clock: c}, nil
}

// Run stands by until this replica holds the Lease, then runs lead with a
// context that is cancelled when leadership ends. It returns
//   - nil, once ctx is done: lead has returned and the Lease was released,
//     so that a standby takes over at once;
//   - lead's error, if lead returns while leading (the Lease is released);
//   - ErrLost, wrapped, if the Lease was lost, once lead has returned: the
//     caller should drop the state it built while leading, and may call
//     Run again to stand by for another term.
func (e *Elector) Run(ctx context.Context, lead func(context.Context) error) error {
	term, err := e.standBy(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return e.lead(ctx, term, lead)
}

// term is one stretch of leadership: the Lease as last written, and when
// the request that wrote it was sent.
type term struct {
	lease     *coordinationv1.Lease
	renewedAt time.Time
}

// timer returns a channel that receives when the clock reaches at, and a
// function that stops it. A zero at never fires (a nil channel).
func (e *Elector) timer(at time.Time) (<-chan time.Time, func()) {
	if at.IsZero() {
		return nil, func() {}
	}
	t := e.clock.NewTimer(at.Sub(e.clock.Now()))
	return t.C(), func() { t.Stop() }
}

// block tells a test, if one is driving, that Run is about to block.
func (e *Elector) block(ctx context.Context) {
	if e.waiting != nil {
		e.waiting(ctx)
	}
}

func (e *Elector) leaseMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace}
}

func (e *Elector) describe() string { return e.cfg.Namespace + "/" + e.cfg.Name }

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/helm-locker/helm-locker/internal/render"
)

// Renderer renders releases again, each in a child process of its own,
// under the deadline and the memory cap of its Options. Its Render is
// render.Render's, and returns the same errors for the same charts, and
// for a render it stopped a *TimeoutError or a *TooLargeError. It is safe
// for concurrent use: each Render starts its own process.
type Renderer struct {
	opts Options
}

// New returns a Renderer with opts; zero fields take DefaultOptions'.
func New(opts Options) *Renderer {
	def := DefaultOptions()
	if opts.Timeout == 0 {
		opts.Timeout = def.Timeout
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = def.MemoryLimit
	}
	return &Renderer{opts: opts}
}

// errDeadline is the cause of a render's context when its deadline, not
// its caller, ended it.
var errDeadline = errors.New("the render's deadline passed")

// waitDelay is how long, once a render's process is killed or has said
// how the render ended, Wait waits for its output pipes to close.
const waitDelay = time.Second

// Render renders rel as render.Render does, on c, in a child process: the
// child renders, and asks for each lookup, which Render makes with c's
// client and records; it holds no credentials. The child is killed at the
// deadline, and when ctx is done; Render returns once it has exited.
func (r *Renderer) Render(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, error) {
	out, _, err := r.run(ctx, rel, c)
	return out, err
}

// usage is what a render's process used.
type usage struct {
	// peakRSS is its peak resident set, in bytes.
	peakRSS int64
}

// run is Render, and what the child used.
func (r *Renderer) run(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, usage, error) {
	if err := r.opts.Validate(); err != nil {
		return nil, usage{}, err
	}
	raw, err := rel.EncodeForSandbox()
	if err != nil {
		return nil, usage{}, err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, r.opts.Timeout, errDeadline)
	defer cancel()
	child, err := r.start(runCtx)
	if err != nil {
		return nil, usage{}, err
	}
	lookups := render.NewLookups(runCtx, c)
	end, talkErr := converse(child.toChild, child.fromChild, job{Helm: rel.Helm, Release: raw, KubeVersion: c.KubeVersion, APIVersions: c.APIVersions}, lookups)
	// Closed, its pipes end a child that still waits on its parent.
	child.toChild.Close()
	child.fromChild.Close()
	waitErr := child.cmd.Wait()
	used := child.usage()

	switch {
	case end != nil:
		// The render ended, and said how, whatever came after.
		out, err := ended(end, lookups)
		return out, used, err
	case ctx.Err() != nil:
		return nil, used, ctx.Err()
	case context.Cause(runCtx) == errDeadline:
		return nil, used, &TimeoutError{Timeout: r.opts.Timeout, Lookups: lookups.Recorded()}
	}
	var tooLarge *frameTooLargeError
	if errors.As(talkErr, &tooLarge) {
		return nil, used, &TooLargeError{Limit: maxFromChild, Output: true, Lookups: lookups.Recorded()}
	}
	if oom, detail := outOfMemory(child.cmd.ProcessState, child.output.String()); oom {
		return nil, used, &TooLargeError{Limit: r.opts.MemoryLimit, Detail: detail, Lookups: lookups.Recorded()}
	}
	if waitErr == nil {
		waitErr = talkErr
	}
	return nil, used, &ProcessError{State: child.cmd.ProcessState.String(), Output: child.output.String(), Err: waitErr}
}

// child is a render's running process, and the parent's ends of its
// pipes.
type child struct {
	cmd                *exec.Cmd
	toChild, fromChild *os.File
	output             *headTail
}

// start starts a render's process, which ctx's end kills, and caps its
// memory before anything is sent to it.
func (r *Renderer) start(ctx context.Context) (*child, error) {
	command := r.opts.Command
	if len(command) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, &ProcessError{Err: fmt.Errorf("finding this executable, to render in: %w", err)}
		}
		command = []string{self, Subcommand}
	}
	fromParent, toChild, err := os.Pipe()
	if err != nil {
		return nil, &ProcessError{Err: err}
	}
	fromChild, toParent, err := os.Pipe()
	if err != nil {
		fromParent.Close()
		toChild.Close()
		return nil, &ProcessError{Err: err}
	}
	output := &headTail{}
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.ExtraFiles = []*os.File{fromParent, toParent} // 3 and 4
	cmd.Stdout, cmd.Stderr = output, output
	cmd.Env = childEnv(r.opts.MemoryLimit)
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	// The child holds its own ends now: closed here, they leave the
	// parent's ends to see the child exit.
	fromParent.Close()
	toParent.Close()
	if err != nil {
		toChild.Close()
		fromChild.Close()
		return nil, &ProcessError{Err: err}
	}
	if err := limitMemory(cmd.Process.Pid, r.opts.MemoryLimit); err != nil {
		_ = cmd.Process.Kill()
		toChild.Close()
		fromChild.Close()
		_ = cmd.Wait()
		return nil, &ProcessError{Err: fmt.Errorf("capping the render's memory: %w", err)}
	}
	return &child{cmd: cmd, toChild: toChild, fromChild: fromChild, output: output}, nil
}

// childEnv is the child's whole environment: none of the locker's, and Go's
// runtime told to keep its heap under three quarters of the cap, so that
// garbage is collected before the kernel refuses memory, and to run on one
// core, as a render does.
func childEnv(memoryLimit int64) []string {
	return []string{
		"GOMEMLIMIT=" + strconv.FormatInt(memoryLimit/4*3, 10),
		"GOMAXPROCS=1",
	}
}

// usage is what the exited child used.
func (c *child) usage() usage {
	if c.cmd.ProcessState == nil {
		return usage{}
	}
	return usage{peakRSS: maxRSS(c.cmd.ProcessState)}
}

// converse sends j, answers the child's lookups, and returns how the
// render ended; an error if the child stopped talking first.
func converse(w io.Writer, r io.Reader, j job, lookups *render.Lookups) (*done, error) {
	if err := writeFrame(w, j); err != nil {
		return nil, err
	}
	for {
		var m fromChild
		if err := readFrame(r, maxFromChild, &m); err != nil {
			return nil, err
		}
		switch {
		case m.Done != nil:
			return m.Done, nil
		case m.Lookup != nil:
			if err := writeFrame(w, answer(lookups, *m.Lookup)); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("the child sent a message of no known kind")
		}
	}
}

// answer makes the lookup l, through lookups. A lookup that failed is
// told as its client's error, which the child's own record of the lookup
// names, as render.Render's would.
func answer(lookups *render.Lookups, l lookupCall) lookupAnswer {
	obj, err := lookups.Lookup(l.APIVersion, l.Kind, l.Namespace, l.Name)
	var le *render.LookupError
	switch {
	case apierrors.IsNotFound(err):
		return lookupAnswer{NotFound: true}
	case errors.As(err, &le):
		return lookupAnswer{Error: le.Err.Error()}
	case err != nil:
		return lookupAnswer{Error: err.Error()}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return lookupAnswer{Error: err.Error()}
	}
	return lookupAnswer{Object: raw}
}

// ended is the render's result as render.Render gives it: a lookup that
// failed is the error, as the parent recorded it, in the words of the
// child's engine, which says where in the chart it failed; else the
// child's error.
func ended(d *done, lookups *render.Lookups) (*render.Output, error) {
	f := d.Failure
	if failed := lookups.Failed(); failed != nil {
		if f == nil {
			return nil, failed
		}
		return nil, &lookupFailure{message: f.Message, err: failed}
	}
	if f != nil {
		if nr := f.NotRenderable; nr != nil {
			return nil, &render.NotRenderableError{Chart: nr.Chart, Dependencies: nr.Dependencies, Err: errors.New(f.Message)}
		}
		return nil, errors.New(f.Message)
	}
	return &render.Output{Manifest: d.Manifest, Lookups: lookups.Recorded(), ReadsAPIVersions: d.ReadsAPIVersions, ReadsKubeVersion: d.ReadsKubeVersion}, nil
}

// lookupFailure is a render stopped by a lookup that failed: the child's
// words for it, and the parent's record of it, for errors.As.
type lookupFailure struct {
	message string
	err     *render.LookupError
}

func (e *lookupFailure) Error() string { return e.message }

func (e *lookupFailure) Unwrap() error { return e.err }

// outOfMemory says whether a process that ended as state, printing
// output, ran out of memory, and what it said of it: Go's runtime throws
// "out of memory" when the kernel refuses it memory (RLIMIT_DATA), and the
// kernel's OOM killer sends SIGKILL, which the parent sends only at the
// deadline.
func outOfMemory(state *os.ProcessState, output string) (bool, string) {
	if state == nil {
		return false, ""
	}
	for _, line := range strings.Split(output, "\n") {
		if strings.Contains(line, "out of memory") || strings.Contains(line, "cannot allocate memory") {
			return true, strings.TrimSpace(line)
		}
	}
	if killed(state) {
		return true, "killed by the kernel"
	}
	return false, ""
}

// headTail keeps the first and the last headTailSize bytes written to it:
// what a failing process printed first (Go's runtime's fatal error) and
// last, and never more.
type headTail struct {
	mu         sync.Mutex
	head, tail []byte
	dropped    bool
}

const headTailSize = 2 << 10

func (b *headTail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if room := headTailSize - len(b.head); room > 0 {
		take := min(room, len(p))
		b.head = append(b.head, p[:take]...)
		p = p[take:]
	}
	if len(p) > headTailSize {
		p, b.dropped = p[len(p)-headTailSize:], true
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - headTailSize; over > 0 {
		b.tail = append(b.tail[:0], b.tail[over:]...)
		b.dropped = true
	}
	return n, nil
}

func (b *headTail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.head)
	if b.dropped {
		s += "\n...\n"
	}
	return strings.TrimSpace(s + string(b.tail))
}

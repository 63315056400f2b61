package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a child process that logs to a file and dies with its parent
// (see processAttrs). The control plane, the e2e harness and the benchmark
// start theirs through it.
type Process struct {
	Name string
	// Log is the file the process's stdout and stderr go to.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// StartProcess runs path with args, logging to log.
func StartProcess(name, path string, args []string, log string) (*Process, error) {
	return StartProcessEnv(name, path, args, nil, log)
}

// StartProcessEnv is StartProcess with environment variables added to the
// test's own.
func StartProcessEnv(name, path string, args, env []string, log string) (*Process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = processAttrs()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: log, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is nil while the process runs, and otherwise says how it ended:
// a test waiting on its log can then stop at once and say why.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited: %w", p.Name, p.err)
		}
		return fmt.Errorf("%s exited with status 0", p.Name)
	default:
		return nil
	}
}

// Stop sends SIGTERM and waits for the process to exit, killing it if it
// has not after timeout, which it reports as an error.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.Name, timeout)
	}
}

// Kill sends SIGKILL and waits for the process to exit: a crash, with no
// chance to clean up, as when a node dies or the kernel's OOM killer
// strikes.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ModuleRoot is the root of the hookd module this package was built from.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildHookd builds cmd/hookd (no race detector, for speed) into dir and
// returns the binary's path.
func BuildHookd(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/hookd")
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/hookd: %v\n%s", err, out)
	}
	return filepath.Join(dir, "hookd"), nil
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Proc is one running process. Its stderr goes to a log file (appended
// across restarts of the same name) and the last lines are kept in memory.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Listen is the process's HTTP address (/readyz, /metrics), if any.
	Listen string

	done   chan struct{}
	mu     sync.Mutex
	tail   bytes.Buffer
	err    error
	logf   *os.File
	killed bool
}

// StartProc starts bin with args; stderr is appended to logPath.
func StartProc(name, bin string, env []string, logPath string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s: %s\n", time.Now().Format(time.RFC3339Nano), name, strings.Join(args, " "))
	p := &Proc{Name: name, done: make(chan struct{}), logf: f}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout = f
	p.Cmd.Stderr = &tailWriter{p: p}
	// Own process group: a kill of the test binary's group does not reach
	// it twice, and SIGINT from a terminal is not delivered to it directly.
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		p.mu.Lock()
		fmt.Fprintf(f, "=== %s exit %s: %v\n", time.Now().Format(time.RFC3339Nano), name, p.err)
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

type tailWriter struct{ p *Proc }

func (w *tailWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	_, _ = w.p.logf.Write(b)
	w.p.tail.Write(b)
	if w.p.tail.Len() > 64<<10 {
		rest := append([]byte(nil), w.p.tail.Bytes()[w.p.tail.Len()-32<<10:]...)
		w.p.tail.Reset()
		w.p.tail.Write(rest)
	}
	return len(b), nil
}

// Tail returns the last stderr output.
func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tail.String()
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill9 sends SIGKILL and waits for the process to be gone. A process that
// had already exited by itself stays reported by UnexpectedExit.
func (p *Proc) Kill9() {
	p.markKilled()
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// markKilled notes that an exit from now on is asked for, unless the
// process is gone already.
func (p *Proc) markKilled() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Exited() {
		p.killed = true
	}
}

// Freeze stops the process with SIGSTOP: its sockets stay open and the
// kernel still accepts connections for it, but nothing answers (a network
// partition as its peers see it). Thaw resumes it.
func (p *Proc) Freeze() error { return p.Cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process with SIGCONT.
func (p *Proc) Thaw() error { return p.Cmd.Process.Signal(syscall.SIGCONT) }

// Stop sends SIGTERM and waits up to timeout, then SIGKILL. It returns the
// exit error (nil for a clean exit 0).
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill9()
		return fmt.Errorf("%s did not stop within %s after SIGTERM", p.Name, timeout)
	}
}

// UnexpectedExit reports an exit that was not asked for (nil while running
// or after Kill9/Stop).
func (p *Proc) UnexpectedExit() error {
	if !p.Exited() {
		return nil
	}
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if killed {
		return nil
	}
	return fmt.Errorf("%s exited by itself: %v", p.Name, p.err)
}

// WaitReady polls http://Listen/readyz until 200.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited before ready: %v\n%s", p.Name, p.err, p.Tail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Listen+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%s not ready within %s:\n%s", p.Name, timeout, p.Tail())
		}
	}
}

// WaitTCP polls addr until it accepts a connection.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if perr := pause(ctx, 50*time.Millisecond); perr != nil {
			return fmt.Errorf("%s not accepting within %s: %v", addr, timeout, err)
		}
	}
}

// pause waits d or until ctx ends: a polling interval, never
// synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ProcStats is what /proc says about a process.
type ProcStats struct {
	// CPU is user+system time.
	CPU time.Duration
	// HWM is the peak resident set (VmHWM); RSS the current one.
	HWM, RSS int64
}

// ReadProcStats reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProcStats(pid int) (ProcStats, error) {
	var s ProcStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return s, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clk = 100 // USER_HZ on Linux
	s.CPU = time.Duration(ut+st) * time.Second / clk
	st2, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(st2), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmHWM":
			s.HWM = n << 10
		case "VmRSS":
			s.RSS = n << 10
		}
	}
	return s, nil
}

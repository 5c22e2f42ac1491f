// Package proctest builds hookd's binaries once per test process and runs
// them as a user would: real processes, real signals, kill -9. It is for
// tests only.
//
// Internal: only hookd's own packages can import it.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binary returns the path of a freshly built cmd/<name> (hookd, hookctl),
// built once per test binary with the race detector off for speed.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "hookd-bin-")
		if buildErr != nil {
			return
		}
		root := moduleRoot()
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "./cmd/hookd", "./cmd/hookctl")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("proctest: %v", buildErr)
	}
	return filepath.Join(buildDir, name)
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Proc is a running binary.
type Proc struct {
	t      testing.TB
	Cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// Start runs bin with args and env (added to the test's environment).
// The process is killed when the test ends if still running.
func Start(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout = io.Discard
	pr, pw := io.Pipe()
	p.Cmd.Stderr = pw
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("proctest: starting %s: %v", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		p.err = p.Cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), p.Stderr())
		}
	})
	return p
}

// Stderr returns what the process wrote to stderr so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	_ = p.Cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; it fails the test on timeout.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("proctest: %s did not exit within %s; stderr:\n%s", p.Cmd.Path, timeout, p.Stderr())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// WaitReady polls http://addr/readyz until it answers 200.
func (p *Proc) WaitReady(addr string, timeout time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		select {
		case <-p.done:
			p.t.Fatalf("proctest: process exited before ready; stderr:\n%s", p.Stderr())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("proctest: %s not ready within %s; stderr:\n%s", addr, timeout, p.Stderr())
		case <-time.After(50 * time.Millisecond): // polling interval, not synchronisation
		}
	}
}

// WaitListening polls addr until it accepts a TCP connection: a broker
// (hookd broker) has no /readyz.
func (p *Proc) WaitListening(addr string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			p.t.Fatalf("proctest: process exited before listening on %s; stderr:\n%s", addr, p.Stderr())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("proctest: nothing listens on %s within %s: %v; stderr:\n%s", addr, timeout, err, p.Stderr())
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// Run runs bin to completion and returns its exit code, stdout and stderr.
func Run(t testing.TB, timeout time.Duration, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("proctest: %s %s did not finish within %s; stderr:\n%s", filepath.Base(bin), strings.Join(args, " "), timeout, errb.String())
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		}
		t.Fatalf("proctest: running %s: %v", bin, err)
	}
	return 0, out.String(), errb.String()
}

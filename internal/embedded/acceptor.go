package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Accept back-off: net/http's, from 5ms doubling to 1s.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	// healthyProbe is how long an Accept that follows a failure waits for
	// a connection before the listener counts as healthy again: a timeout
	// means nothing is queued that the process cannot take.
	healthyProbe = 100 * time.Millisecond
)

// acceptor is the broker's listener as kfake sees it. kfake's accept loop
// returns on the first Accept error and closes the listener, so a temporary
// "too many open files" (EMFILE) would leave the port refusing every
// connection until a restart. The acceptor never hands kfake an error but
// its own Close: it retries with back-off, re-binds the address when the
// listener itself broke, and reports meanwhile through Err (for /readyz).
type acceptor struct {
	addr   string
	logger *slog.Logger
	done   chan struct{}

	mu     sync.Mutex
	ln     net.Listener
	failed error     // why connections are not being accepted; nil while they are
	since  time.Time // when failed started
	closed bool
	// failures counts failed accepts and lastFailure is the newest: Err
	// is nil again as soon as one accept succeeds, these are not.
	failures    int
	lastFailure error
	// private, while set, is the only listener Accept serves: a broker
	// repairing its log after a crash admits its own client through it,
	// and clients dialling the public address wait in the kernel's
	// backlog until release.
	private net.Listener
}

func newAcceptor(ln net.Listener, logger *slog.Logger) *acceptor {
	return &acceptor{addr: ln.Addr().String(), logger: logger, ln: ln, done: make(chan struct{})}
}

// Accept returns the next connection; it returns an error only after Close.
func (a *acceptor) Accept() (net.Conn, error) {
	for {
		ln := a.held()
		if ln == nil {
			break
		}
		if c, err := ln.Accept(); err == nil {
			return c, nil
		}
		if a.isClosed() {
			return nil, net.ErrClosed
		}
		// release closed the private listener: serve the public one.
	}
	backoff := acceptBackoffMin
	for {
		ln, probing, err := a.current()
		if err != nil {
			return nil, err
		}
		c, err := ln.Accept()
		if probing {
			setDeadline(ln, time.Time{})
		}
		switch {
		case err == nil:
			a.recovered()
			return c, nil
		case a.isClosed():
			return nil, net.ErrClosed
		case probing && isTimeout(err):
			a.recovered() // nothing queued that we could not take
			continue
		}
		a.fail(ln, err)
		select {
		case <-a.done:
			return nil, net.ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, acceptBackoffMax)
	}
}

// current is the listener to accept on; probing says a failure is being
// retried, with a deadline on the Accept so that a listener that recovered
// while nobody dialled is seen to have recovered.
func (a *acceptor) current() (net.Listener, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, false, net.ErrClosed
	}
	probing := a.failed != nil && setDeadline(a.ln, time.Now().Add(healthyProbe))
	return a.ln, probing, nil
}

// fail records why ln did not accept. A temporary error (EMFILE, ENFILE,
// ECONNABORTED, ...) passes once descriptors are freed; any other means
// the listener broke, and the address is bound afresh.
func (a *acceptor) fail(ln net.Listener, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == nil {
		a.since = time.Now()
		a.logger.Warn("embedded kafka: not accepting connections, retrying", "listen", a.addr, "error", err)
	}
	a.failed, a.lastFailure = err, err
	a.failures++
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() || a.ln != ln {
		return
	}
	_ = ln.Close()
	fresh, lerr := net.Listen("tcp", a.addr)
	if lerr != nil {
		a.failed = fmt.Errorf("%w; listening again: %w", err, listenCause(lerr))
		return
	}
	a.logger.Warn("embedded kafka: listening again after its listener broke", "listen", a.addr, "error", err)
	a.ln = fresh
}

// hold makes Accept serve only a new private loopback listener, whose
// address it returns, until release.
func (a *acceptor) hold() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("private listener: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.private = ln
	return ln.Addr().String(), nil
}

// release closes the private listener; Accept serves the public one again.
func (a *acceptor) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.private != nil {
		_ = a.private.Close()
		a.private = nil
	}
}

func (a *acceptor) held() net.Listener {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.private
}

func (a *acceptor) recovered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed != nil {
		a.logger.Info("embedded kafka: accepting connections again", "listen", a.addr, "after", time.Since(a.since).Round(time.Millisecond))
	}
	a.failed = nil
}

// Err says why the broker is not accepting connections now, or nil.
func (a *acceptor) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == nil {
		return nil
	}
	return fmt.Errorf("embedded kafka not accepting connections since %s (%s), retrying: %w",
		a.since.UTC().Format(time.RFC3339), time.Since(a.since).Round(time.Second), a.failed)
}

func (a *acceptor) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Close stops accepting for good; kfake calls it when the cluster closes.
func (a *acceptor) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	close(a.done)
	if a.private != nil {
		_ = a.private.Close()
	}
	return a.ln.Close()
}

// Addr is the address bound at start, kept across re-binds.
func (a *acceptor) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ln.Addr()
}

func setDeadline(ln net.Listener, t time.Time) bool {
	d, ok := ln.(interface{ SetDeadline(time.Time) error })
	return ok && d.SetDeadline(t) == nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

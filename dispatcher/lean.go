package dispatcher

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// leanClient posts webhooks over HTTP/1.1 without net/http's per-request
// goroutine handoffs: a request is written and its response read on the
// calling goroutine, over a keep-alive connection from a per-host pool.
// It serves http:// endpoints without an egress proxy; https and the
// proxy stay on net/http (HTTP/2 and the CONNECT dialer).
//
// A connection is closed on any error, on Connection: close (or an
// HTTP/1.0 answer without keep-alive) and when the body is not read to
// its end within the read limit. A request on a reused idle connection is
// retried once on a new one when the connection fails before any byte of
// the request was written, or ends (EOF, reset) before any byte of the
// response: the server closed it while idle, as net/http does.
type leanClient struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int // per host
	idleTimeout time.Duration

	mu        sync.Mutex
	idle      map[string][]*leanConn
	active    map[*leanConn]struct{}
	watched   map[<-chan struct{}]bool
	lastSweep time.Time
	closed    bool
}

// leanMaxHeaderBytes bounds a response's status line and headers, as
// the transport's MaxResponseHeaderBytes does.
const leanMaxHeaderBytes = 64 << 10

var errHeadersTooLarge = errors.New("response headers exceed 64 KiB")

func newLeanClient(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int) *leanClient {
	return &leanClient{dial: dial, maxIdle: maxIdle, idleTimeout: 90 * time.Second,
		idle: map[string][]*leanConn{}, active: map[*leanConn]struct{}{}, watched: map[<-chan struct{}]bool{}}
}

// leanConn is one connection with its buffers.
type leanConn struct {
	net.Conn
	addr    string
	br      *bufio.Reader
	bw      *bufio.Writer
	done    <-chan struct{} // of the request's context, while active
	idleAt  time.Time
	written int64 // bytes of requests written to Conn
	read    int64 // bytes read from Conn
	hdrLeft int   // header bytes still allowed; -1: no limit
}

func (c *leanConn) Read(p []byte) (int, error) {
	if c.hdrLeft >= 0 {
		if c.hdrLeft == 0 {
			return 0, errHeadersTooLarge
		}
		p = p[:min(len(p), c.hdrLeft)]
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if c.hdrLeft >= 0 {
		c.hdrLeft -= n
	}
	return n, err
}

// connWriter counts what reaches the connection.
type connWriter struct{ c *leanConn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.Conn.Write(p)
	w.c.written += int64(n)
	return n, err
}

// leanRequest is what post writes: the request line and headers are
// written in this order, then body. The headers are held in an array, not
// a slice, so that a request needs no allocation of its own.
type leanRequest struct {
	addr, host, uri string
	headers         [leanHeaders][2]string
	body            []byte
}

// leanHeaders is the number of headers of a request: User-Agent,
// Content-Type and the three of the signature scheme.
const leanHeaders = 5

// leanResponse is what came back, the body read up to limit.
type leanResponse struct {
	status     int
	retryAfter string
	body       []byte
}

// do makes req and reads up to limit bytes of the response body before
// the deadline.
func (lc *leanClient) do(ctx context.Context, req *leanRequest, limit int64, deadline time.Time) (leanResponse, error) {
	for try := 0; ; try++ {
		c, reused, err := lc.get(ctx, req.addr, deadline)
		if err != nil {
			return leanResponse{}, err
		}
		res, keep, err := lc.exchange(ctx, c, req, limit, deadline)
		lc.release(c, keep && err == nil)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return leanResponse{}, ctx.Err()
		}
		if try > 0 || !reused || !retryable(c, err) {
			return leanResponse{}, err
		}
	}
}

// retryable reports whether err on a reused connection means the server
// closed it while idle: nothing of the request was written, or nothing of
// the response was read and the connection ended.
func retryable(c *leanConn, err error) bool {
	if c.written == 0 {
		return true
	}
	return c.read == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// exchange writes req on c and reads the response; keep reports whether
// c can serve another request.
func (lc *leanClient) exchange(ctx context.Context, c *leanConn, req *leanRequest, limit int64, deadline time.Time) (leanResponse, bool, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return leanResponse{}, false, err
	}
	if err := ctx.Err(); err != nil {
		// Checked after the deadline is set: watch's cut, if ctx ended
		// since, is not overwritten.
		return leanResponse{}, false, err
	}
	c.written, c.read = 0, 0
	if err := writeRequest(c.bw, req); err != nil {
		return leanResponse{}, false, err
	}
	c.hdrLeft = leanMaxHeaderBytes
	if _, err := c.br.Peek(1); err != nil {
		return leanResponse{}, false, err // as it came: EOF when closed by the server
	}
	var h respHead
	for {
		var err error
		if h, err = readHead(c.br); err != nil {
			return leanResponse{}, false, err
		}
		// 1xx answers (100 Continue, 103 Early Hints) come before the
		// real one and carry no body.
		if h.status > 199 || h.status == http.StatusSwitchingProtocols {
			break
		}
		c.hdrLeft = leanMaxHeaderBytes
	}
	c.hdrLeft = -1
	out := leanResponse{status: h.status, retryAfter: h.retryAfter}
	keep := !h.close && h.status != http.StatusSwitchingProtocols && (h.chunked || h.length >= 0)
	if h.length == 0 {
		return out, keep, nil
	}
	out.body, keep = readBody(h.body(c.br), limit, keep)
	return out, keep, nil
}

// readBody reads up to limit bytes of body. The connection stays usable
// only when the body ended within the limit.
func readBody(body io.Reader, limit int64, keep bool) ([]byte, bool) {
	buf := make([]byte, 0, min(limit, 512))
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):min(int64(cap(buf)), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, keep
		}
		if err != nil {
			// The status is the receiver's answer: a body cut short by
			// the deadline or the connection does not change it.
			return buf, false
		}
	}
	var one [1]byte
	n, err := body.Read(one[:])
	return buf, keep && n == 0 && err == io.EOF
}

// writeRequest writes req as an HTTP/1.1 POST and flushes it.
func writeRequest(w *bufio.Writer, req *leanRequest) error {
	w.WriteString("POST ")
	w.WriteString(req.uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(req.host)
	w.WriteString("\r\nContent-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(req.body)), 10))
	w.WriteString("\r\n")
	for _, h := range req.headers {
		w.WriteString(h[0])
		w.WriteString(": ")
		w.WriteString(h[1])
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(req.body)
	return w.Flush()
}

// get returns an idle connection to addr (reused) or dials a new one. It
// makes the end of ctx cut the requests made under it (watch).
func (lc *leanClient) get(ctx context.Context, addr string, deadline time.Time) (*leanConn, bool, error) {
	done := ctx.Done()
	now := time.Now()
	lc.mu.Lock()
	if done != nil && !lc.watched[done] {
		lc.mu.Unlock()
		lc.watch(ctx)
		lc.mu.Lock()
	}
	if lc.closed {
		lc.mu.Unlock()
		return nil, false, errors.New("client closed")
	}
	for conns := lc.idle[addr]; len(conns) > 0; conns = lc.idle[addr] {
		c := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		lc.idle[addr] = conns[:len(conns)-1]
		if now.Sub(c.idleAt) >= lc.idleTimeout {
			c.Close()
			continue
		}
		c.done = done
		lc.active[c] = struct{}{}
		lc.mu.Unlock()
		return c, true, nil
	}
	lc.mu.Unlock()
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := lc.dial(dctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := &leanConn{Conn: nc, addr: addr, done: done, hdrLeft: -1}
	c.br = bufio.NewReaderSize(c, 4096)
	c.bw = bufio.NewWriterSize(connWriter{c}, 4096)
	lc.mu.Lock()
	if lc.closed {
		lc.mu.Unlock()
		nc.Close()
		return nil, false, errors.New("client closed")
	}
	lc.active[c] = struct{}{}
	lc.mu.Unlock()
	return c, false, nil
}

// release ends c's request: back to the idle pool when keep, else closed.
func (lc *leanClient) release(c *leanConn, keep bool) {
	now := time.Now()
	lc.mu.Lock()
	delete(lc.active, c)
	c.done = nil
	if keep && !lc.closed && len(lc.idle[c.addr]) < lc.maxIdle {
		c.idleAt = now
		lc.idle[c.addr] = append(lc.idle[c.addr], c)
		keep = true
	} else {
		keep = false
	}
	lc.sweepLocked(now)
	lc.mu.Unlock()
	if !keep {
		c.Close()
	}
}

// sweepLocked closes, at most every idleTimeout/10, the connections idle
// for idleTimeout, so that hosts no longer requested hold no sockets.
func (lc *leanClient) sweepLocked(now time.Time) {
	if now.Sub(lc.lastSweep) < lc.idleTimeout/10 {
		return
	}
	lc.lastSweep = now
	for addr, conns := range lc.idle {
		kept := conns[:0]
		for _, c := range conns {
			if now.Sub(c.idleAt) >= lc.idleTimeout {
				c.Close()
				continue
			}
			kept = append(kept, c)
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(lc.idle, addr)
		} else {
			lc.idle[addr] = kept
		}
	}
}

// watch makes the end of ctx cut the requests made under it, once per
// context (the dispatcher passes the same one to every request). get
// calls it for a context it has not seen.
func (lc *leanClient) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		return
	}
	lc.mu.Lock()
	seen := lc.watched[done]
	lc.watched[done] = true
	lc.mu.Unlock()
	if seen {
		return
	}
	context.AfterFunc(ctx, func() {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		delete(lc.watched, done)
		for c := range lc.active {
			if c.done == done {
				_ = c.SetDeadline(time.Unix(1, 0)) // its read or write fails now
			}
		}
	})
}

// closeIdle closes the idle connections; with stop, no new ones are made.
func (lc *leanClient) closeIdle(stop bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.closed = lc.closed || stop
	for addr, conns := range lc.idle {
		for _, c := range conns {
			c.Close()
		}
		delete(lc.idle, addr)
	}
}

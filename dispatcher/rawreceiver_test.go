package dispatcher_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawReceiver is a receiver on 127.0.0.1 that answers with crafted bytes:
// it reads each request with net/http's parser, then a request to /b gets
// an honest "503, B:<webhook-id>" and a request to /a gets what answerA
// writes. Two endpoints of different accounts on /a and /b share its
// host:port, so a client that mixes up connections shows it as one
// endpoint's answer recorded for the other.
type rawReceiver struct {
	ln      net.Listener
	answerA rawAnswer
	done    chan struct{}
	wg      sync.WaitGroup
	// pending counts answers still being written after their exchange
	// (unsolicited bytes): a test waits for them before the next request.
	pending atomic.Int32
	// flooded counts the bytes flood wrote: how much of an endless answer
	// the client took before giving up.
	flooded atomic.Int64

	mu       sync.Mutex
	requests map[string]int // webhook-id -> requests read whole
	nA       int
	conns    map[net.Conn]struct{}
}

// rawAnswer writes the answer to the nth request to /a (from 1) on c;
// false closes the connection after it.
type rawAnswer func(c *rawConn, n int, id string) bool

// newRawReceiver starts a receiver; with tlsCfg non-nil it serves TLS.
func newRawReceiver(t testing.TB, tlsCfg *tls.Config, answerA rawAnswer) *rawReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	r := &rawReceiver{ln: ln, answerA: answerA, done: make(chan struct{}),
		requests: map[string]int{}, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *rawReceiver) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *rawReceiver) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		select {
		case <-r.done:
			r.mu.Unlock()
			c.Close()
			return
		default:
		}
		r.conns[c] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(c)
	}
}

func (r *rawReceiver) serve(nc net.Conn) {
	defer r.wg.Done()
	defer func() {
		nc.Close()
		r.mu.Lock()
		delete(r.conns, nc)
		r.mu.Unlock()
	}()
	c := &rawConn{Conn: nc, r: r}
	br := bufio.NewReader(nc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		id := req.Header.Get("Webhook-Id")
		r.mu.Lock()
		r.requests[id]++
		if req.URL.Path == "/a" {
			r.nA++
		}
		n := r.nA
		r.mu.Unlock()
		keep := false
		if req.URL.Path == "/a" {
			keep = r.answerA(c, n, id)
		} else {
			ans := "B:" + id
			keep = c.write(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s", len(ans), ans))
		}
		if !keep {
			return
		}
	}
}

// count returns how many requests with webhook-id id were read whole.
func (r *rawReceiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[id]
}

func (r *rawReceiver) close() {
	r.mu.Lock()
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.ln.Close()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// rawConn is a receiver's connection with the ways a hostile receiver writes.
type rawConn struct {
	net.Conn
	r *rawReceiver
}

// write writes s whole; false when the connection failed.
func (c *rawConn) write(s string) bool {
	_, err := io.WriteString(c.Conn, s)
	return err == nil
}

// later writes s after d, while the connection is idle.
func (c *rawConn) later(d time.Duration, s string) {
	c.r.pending.Add(1)
	c.r.wg.Add(1)
	go func() {
		defer c.r.wg.Done()
		defer c.r.pending.Add(-1)
		select {
		case <-time.After(d):
			c.write(s)
		case <-c.r.done:
		}
	}()
}

// flood writes head, then rep until the connection fails (the client
// gave up) or the receiver closes, counting what it wrote in flooded.
func (c *rawConn) flood(head, rep string) {
	if !c.write(head) {
		return
	}
	c.r.flooded.Add(int64(len(head)))
	for {
		select {
		case <-c.r.done:
			return
		default:
		}
		if !c.write(rep) {
			return
		}
		c.r.flooded.Add(int64(len(rep)))
	}
}

// drip writes s one byte every interval until it is written, the
// connection fails or the receiver closes.
func (c *rawConn) drip(s string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; i < len(s); i++ {
		if !c.write(s[i : i+1]) {
			return
		}
		select {
		case <-tick.C:
		case <-c.r.done:
			return
		}
	}
}

package dispatcher_test

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
)

// smuggled is the response a hostile receiver leaves on a connection
// for the next request to read: 202 is answered by no receiver itself.
const smuggled = "HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\n\r\nSMUGGLED"

// ok200 is an honest answer of receiver A.
func ok200(id string) string {
	body := "A:" + id
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// hostileCase is how receiver A misbehaves.
type hostileCase struct {
	name   string
	answer rawAnswer
	// bounded: the client's own budget (header size, 1xx count, trailer
	// size, read limit) ends A's attempts well within the request timeout,
	// having taken a bounded part of an endless answer.
	bounded bool
}

var hostileCases = []hostileCase{
	{name: "extra bytes after a response", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nAAAAAAAA" + smuggled)
	}},
	{name: "unsolicited response while idle", answer: func(c *rawConn, _ int, id string) bool {
		if !c.write(ok200(id)) {
			return false
		}
		c.later(500*time.Millisecond, smuggled)
		return true
	}},
	{name: "204 with a body", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 204 No Content\r\n\r\n" + smuggled)
	}},
	{name: "short content-length", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK" + smuggled)
	}},
	{name: "two content-lengths", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nContent-Length: 60\r\n\r\nAAAAAAAA" + smuggled)
	}},
	{name: "folded content-length", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n 60\r\n\r\nAAAAAAAA" + smuggled)
	}},
	{name: "content-length over 4 KiB", answer: func(c *rawConn, _ int, _ string) bool {
		// 4 KiB of leading zeros: net/http reads the whole value.
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: " + strings.Repeat("0", 4100) +
			strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled)
	}},
	{name: "chunked plus content-length", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nAAAAAAAA\r\n0\r\n\r\n" + smuggled)
	}},
	{name: "NUL in a header name", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.1 200 OK\r\nX-\x00: y\r\nContent-Length: 8\r\n\r\nAAAAAAAA" + smuggled)
	}},
	{name: "HTTP/1.0 answer kept open", answer: func(c *rawConn, _ int, _ string) bool {
		return c.write("HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\nAAAAAAAA" + smuggled)
	}},
	{name: "HTTP/1.0 keep-alive chunked", answer: func(c *rawConn, _ int, _ string) bool {
		c.write("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nAAAAAAAA\r\n0\r\n\r\n" + smuggled)
		return false // the body of an HTTP/1.0 answer ends with the connection
	}},
	{name: "1xx flood", bounded: true, answer: func(c *rawConn, _ int, _ string) bool {
		c.flood("", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		return false
	}},
	{name: "endless chunked body", bounded: true, answer: func(c *rawConn, _ int, _ string) bool {
		c.flood("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "400\r\n"+strings.Repeat("A", 1024)+"\r\n")
		return false
	}},
	{name: "endless trailers", bounded: true, answer: func(c *rawConn, _ int, _ string) bool {
		c.flood("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nAAAAAAAA\r\n0\r\n", "X-Trailer: aaaaaaaaaaaaaaaa\r\n")
		return false
	}},
	{name: "1 MB header line", bounded: true, answer: func(c *rawConn, _ int, _ string) bool {
		c.write("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\nContent-Length: 8\r\n\r\nAAAAAAAA")
		return false
	}},
	{name: "one byte per second", answer: func(c *rawConn, _ int, id string) bool {
		c.drip(ok200(id), time.Second)
		return false
	}},
	{name: "close after the whole request was read", answer: func(c *rawConn, n int, id string) bool {
		// The first answer makes the connection a reused one.
		return n == 1 && c.write(ok200(id))
	}},
}

// hostileTimeout is the request timeout of the suite.
const hostileTimeout = 3 * time.Second

// TestHostileReceivers: receiver A answers each case's crafted bytes,
// receiver B (another account, same host:port) honestly 503. Requests go
// A, B, A, B, one at a time, so a connection A poisoned is the one the
// next request would reuse. Each attempt record must be its own
// receiver's answer, each request read once, every attempt done within
// the request timeout, and goroutines and memory bounded meanwhile.
func TestHostileReceivers(t *testing.T) {
	// Not parallel with the other tests: the goroutine and heap peaks are
	// the process's.
	runHostile(t, nil, "http", hostileCases)
}

func runHostile(t *testing.T, srvTLS *tls.Config, scheme string, cases []hostileCase, cfgs ...func(*dispatcher.Config)) {
	b := setup(t, setupOpts{partitions: 2})
	cfg := dispatcher.Config{AllowPrivateNetworks: true, Timeout: hostileTimeout, ConnectTimeout: time.Second}
	for _, f := range cfgs {
		f(&cfg)
	}
	b.start(cfg, runOpts{})
	stopSampling, peak := sampleRuntime()
	t.Run("cases", func(t *testing.T) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				hostileCaseRun(t, b, newRawReceiver(t, srvTLS, tc.answer), scheme, fmt.Sprintf("c%02d", i), tc)
			})
		}
	})
	stopSampling()
	g, heap := peak()
	t.Logf("peak goroutines %d, peak heap %d MiB", g, heap>>20)
	require.Less(t, g, 500, "goroutines bounded")
	require.Less(t, heap, uint64(128<<20), "heap bounded")
}

func hostileCaseRun(t *testing.T, b *bundle, rcv *rawReceiver, scheme, key string, tc hostileCase) {
	host := "127.0.0.1"
	if scheme == "https" {
		host = "localhost"
	}
	for _, side := range []string{"a", "b"} {
		b.eps.set(dispatcher.Target{ID: "ep_" + key + "_" + side, Account: "acct_" + key + "_" + side,
			URL: fmt.Sprintf("%s://%s:%d/%s", scheme, host, rcv.port(), side)})
	}
	for step, side := range []string{"a", "b", "a", "b"} {
		eventually(t, 10*time.Second, func() bool { return rcv.pending.Load() == 0 }, "unsolicited bytes written")
		d := newDelivery(fmt.Sprintf("evt_%s_%s%d", key, side, step), "ep_"+key+"_"+side)
		d.Account = "acct_" + key + "_" + side
		b.produce(-1, d)
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) > 0 }, "attempt of %s", d.ID)
		a := b.col.attemptsFor(d.ID)[0]
		t.Logf("%s: status %d class %q excerpt %.40q error %.80q in %s", d.ID, a.StatusCode, a.ErrorClass, a.ResponseExcerpt, a.Error, a.Duration)
		if side == "b" {
			require.Equal(t, 503, a.StatusCode, "B's attempt %s records B's answer (%q)", d.ID, a.ResponseExcerpt)
			require.Equal(t, "B:"+d.EventID, a.ResponseExcerpt, "B's attempt %s records B's body", d.ID)
			require.Equal(t, attempt.OutcomeRetry, a.Outcome)
		} else {
			require.NotContains(t, []int{202, 503}, a.StatusCode, "A's attempt %s records only A's answers", d.ID)
			require.NotContains(t, a.ResponseExcerpt, "B:", "A's attempt %s records only A's answers", d.ID)
			if tc.bounded {
				// Not the timeout (a loaded machine under -race is slow).
				require.Less(t, a.Duration, hostileTimeout*3/4, "A's attempt %s ended by the client's budget", d.ID)
			}
		}
		require.LessOrEqual(t, a.Duration, hostileTimeout+time.Second, "attempt %s within the request timeout", d.ID)
		require.Equal(t, 1, rcv.count(d.EventID), "request of %s read once in its one attempt", d.ID)
	}
	assertOneAttemptEach(t, b, key)
	if tc.bounded {
		// What the client read of an endless answer, plus the socket
		// buffers: a client without a budget reads on until the timeout.
		t.Logf("endless answers: %d bytes taken", rcv.flooded.Load())
		require.Less(t, rcv.flooded.Load(), int64(16<<20), "bytes of endless answers taken")
	}
}

// assertOneAttemptEach: no delivery of the case got a second attempt
// record (the tiers are 30s away).
func assertOneAttemptEach(t *testing.T, b *bundle, key string) {
	t.Helper()
	for step, side := range []string{"a", "b", "a", "b"} {
		id := delivery.ID(fmt.Sprintf("evt_%s_%s%d", key, side, step), "ep_"+key+"_"+side)
		require.Len(t, b.col.attemptsFor(id), 1, "attempts of %s", id)
	}
}

// sampleRuntime samples the goroutine count and the heap every 50ms until
// stopped; peak returns the highest seen.
func sampleRuntime() (stop func(), peak func() (int, uint64)) {
	var g atomic.Int64
	var heap atomic.Uint64
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			if n := int64(runtime.NumGoroutine()); n > g.Load() {
				g.Store(n)
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > heap.Load() {
				heap.Store(ms.HeapAlloc)
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-exited }, func() (int, uint64) { return int(g.Load()), heap.Load() }
}

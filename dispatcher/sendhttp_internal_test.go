package dispatcher

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/delivery"
)

// The sender against real servers on 127.0.0.1.

const sendSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var sendDelivery = &delivery.Delivery{ID: "dlv_1", EventID: "evt_1", Body: []byte(`{"x":1}`)}

// sendServer is a net/http server counting the connections it accepted.
type sendServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newSendServer(t *testing.T, h http.HandlerFunc) *sendServer {
	s := &sendServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func testSender(t *testing.T, mutate func(*Config)) *sender {
	cfg := Config{AllowPrivateNetworks: true, ConnectTimeout: 5 * time.Second, ResponseReadLimit: 1024, ResponseExcerpt: 100}
	if mutate != nil {
		mutate(&cfg)
	}
	cfg.setDefaults()
	s := newSender(cfg)
	t.Cleanup(s.closeIdle)
	return s
}

func target(url string) Target {
	return Target{ID: "ep_1", URL: url, Secrets: []string{sendSecret}}
}

func TestSendKeepAliveAndHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []http.Header
	srv := newSendServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		require.Equal(t, `{"x":1}`, string(body))
		require.Equal(t, "/hook?a=1", r.URL.RequestURI())
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(503)
		_, _ = io.WriteString(w, "busy")
	})
	s := testSender(t, nil)
	for range 5 {
		res := s.send(context.Background(), target(srv.URL+"/hook?a=1"), sendDelivery, 5*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, 503, res.status)
		require.Equal(t, "7", res.retryAfter)
		require.Equal(t, "busy", res.excerpt)
	}
	require.Equal(t, int64(1), srv.conns.Load(), "one keep-alive connection")
	h := got[0]
	require.Equal(t, "evt_1", h.Get("Webhook-Id"))
	require.NotEmpty(t, h.Get("Webhook-Timestamp"))
	require.True(t, strings.HasPrefix(h.Get("Webhook-Signature"), "v1,"), h.Get("Webhook-Signature"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, defaultUserAgentForTest(), h.Get("User-Agent"))
}

func defaultUserAgentForTest() string {
	var c Config
	c.setDefaults()
	return c.UserAgent
}

// Chunked and Content-Length bodies are read to their end and leave the
// connection reusable; a body beyond the read limit is cut to the excerpt
// and its connection dropped; Connection: close drops it too.
func TestSendBodies(t *testing.T) {
	t.Parallel()
	srv := newSendServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			_, _ = io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part2")
		case "/length":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "12345")
		case "/large":
			w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			_, _ = io.WriteString(w, strings.Repeat("a", 1<<20))
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/continue":
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "made")
		}
	})
	s := testSender(t, nil)
	send := func(path string) response {
		res := s.send(context.Background(), target(srv.URL+path), sendDelivery, 5*time.Second)
		require.NoError(t, res.err, path)
		return res
	}
	require.Equal(t, "part1,part2", send("/chunked").excerpt)
	require.Equal(t, "12345", send("/length").excerpt)
	require.Equal(t, "part1,part2", send("/chunked").excerpt)
	res := send("/continue")
	require.Equal(t, 201, res.status, "1xx ignored")
	require.Equal(t, "made", res.excerpt)
	require.Equal(t, int64(1), srv.conns.Load(), "bodies read to the end: one connection")

	res = send("/large")
	require.Equal(t, strings.Repeat("a", 100), res.excerpt)
	send("/length")
	require.Equal(t, int64(2), srv.conns.Load(), "a body beyond the limit drops its connection")

	require.Equal(t, "bye", send("/close").excerpt)
	send("/length")
	require.Equal(t, int64(3), srv.conns.Load(), "Connection: close drops it")
}

// A server slower than the timeout: the attempt fails as a timeout, in
// about the timeout.
func TestSendTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := newSendServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s := testSender(t, nil)
	res := s.send(context.Background(), target(srv.URL), sendDelivery, 200*time.Millisecond)
	require.Error(t, res.err)
	require.Equal(t, ClassTimeout, Classify(0, res.err, 0, 0).ErrorClass, res.err.Error())
}

// The end of the context cuts a request in flight.
func TestSendCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := newSendServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s := testSender(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	res := s.send(ctx, target(srv.URL), sendDelivery, time.Minute)
	require.ErrorIs(t, res.err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second, "cut, not timed out")
}

// An HTTP/1.0 answer without keep-alive: read, and its connection closed.
func TestSendHTTP10(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, "HTTP/1.0 202 Accepted\r\nContent-Type: text/plain\r\n\r\nold server")
			}()
		}
	}()
	s := testSender(t, nil)
	for range 2 {
		res := s.send(context.Background(), target("http://"+ln.Addr().String()+"/"), sendDelivery, 5*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, 202, res.status)
		require.Equal(t, "old server", res.excerpt)
	}
	require.Equal(t, int64(2), conns.Load(), "no reuse after an HTTP/1.0 answer")
}

// Requests are dialled through the SSRF guard.
func TestSendKeepsTheGuard(t *testing.T) {
	t.Parallel()
	srv := newSendServer(t, func(http.ResponseWriter, *http.Request) {})
	s := testSender(t, func(c *Config) { c.AllowPrivateNetworks = false })
	res := s.send(context.Background(), target(srv.URL), sendDelivery, 5*time.Second)
	require.True(t, errors.Is(res.err, ssrf.ErrRefused), "%v", res.err)
	require.Equal(t, int64(0), srv.conns.Load())
}

// Header values net/http refuses are refused too: no header injection.
func TestSendRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	srv := newSendServer(t, func(http.ResponseWriter, *http.Request) {})
	s := testSender(t, nil)
	d := &delivery.Delivery{ID: "dlv_1", EventID: "evt_1\r\nX-Injected: 1", Body: []byte(`{}`)}
	res := s.send(context.Background(), target(srv.URL), d, 5*time.Second)
	require.Error(t, res.err)
	require.Equal(t, int64(0), srv.conns.Load())
}

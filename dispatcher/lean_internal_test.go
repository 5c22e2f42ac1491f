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

// The lean client against real net/http servers on 127.0.0.1.

const leanSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var leanDelivery = &delivery.Delivery{ID: "dlv_1", EventID: "evt_1", Body: []byte(`{"x":1}`)}

// leanServer is a net/http server counting the connections it accepted.
type leanServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newLeanServer(t *testing.T, h http.HandlerFunc) *leanServer {
	s := &leanServer{}
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

func leanSender(t *testing.T, mutate func(*Config)) *sender {
	cfg := Config{AllowPrivateNetworks: true, ConnectTimeout: 5 * time.Second, ResponseReadLimit: 1024, ResponseExcerpt: 100}
	if mutate != nil {
		mutate(&cfg)
	}
	cfg.setDefaults()
	s := newSender(cfg)
	require.NotNil(t, s.lean, "the lean client serves http://")
	t.Cleanup(func() { s.lean.closeIdle(true) })
	return s
}

// idleConns counts s's idle lean connections.
func idleConns(s *sender) int {
	s.lean.mu.Lock()
	defer s.lean.mu.Unlock()
	n := 0
	for _, cs := range s.lean.idle {
		n += len(cs)
	}
	return n
}

func target(url string) Target {
	return Target{ID: "ep_1", URL: url, Secrets: []string{leanSecret}}
}

func TestLeanKeepAliveAndHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []http.Header
	srv := newLeanServer(t, func(w http.ResponseWriter, r *http.Request) {
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
	s := leanSender(t, nil)
	for range 5 {
		res := s.send(context.Background(), target(srv.URL+"/hook?a=1"), leanDelivery, 5*time.Second)
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

// A server that closes its idle connections: the next request is retried
// on a new connection and succeeds.
func TestLeanServerClosedIdle(t *testing.T) {
	t.Parallel()
	srv := newLeanServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	s := leanSender(t, nil)
	tg := target(srv.URL)
	require.Equal(t, 200, s.send(context.Background(), tg, leanDelivery, 5*time.Second).status)
	for i := range 5 {
		srv.CloseClientConnections()
		res := s.send(context.Background(), tg, leanDelivery, 5*time.Second)
		require.NoError(t, res.err, "request %d", i)
		require.Equal(t, 200, res.status)
	}
	require.Equal(t, int64(6), srv.conns.Load())
}

// Chunked and Content-Length bodies are read to their end and leave the
// connection reusable; a body beyond the read limit is cut to the excerpt
// and its connection dropped; Connection: close drops it too.
func TestLeanBodies(t *testing.T) {
	t.Parallel()
	srv := newLeanServer(t, func(w http.ResponseWriter, r *http.Request) {
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
	s := leanSender(t, nil)
	send := func(path string) response {
		res := s.send(context.Background(), target(srv.URL+path), leanDelivery, 5*time.Second)
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
	require.Zero(t, idleConns(s), "Connection: close: not kept idle")
	send("/length")
	require.Equal(t, int64(3), srv.conns.Load(), "Connection: close drops it")
}

// A server slower than the timeout: the attempt fails as a timeout, in
// about the timeout.
func TestLeanTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := newLeanServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s := leanSender(t, nil)
	res := s.send(context.Background(), target(srv.URL), leanDelivery, 200*time.Millisecond)
	require.Error(t, res.err)
	require.Equal(t, ClassTimeout, Classify(0, res.err, 0, 0).ErrorClass, res.err.Error())
}

// The end of the context cuts a request in flight.
func TestLeanCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := newLeanServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s := leanSender(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	res := s.send(ctx, target(srv.URL), leanDelivery, time.Minute)
	require.ErrorIs(t, res.err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second, "cut, not timed out")
}

// An HTTP/1.0 answer without keep-alive: read, and its connection closed.
func TestLeanHTTP10(t *testing.T) {
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
	s := leanSender(t, nil)
	for range 2 {
		res := s.send(context.Background(), target("http://"+ln.Addr().String()+"/"), leanDelivery, 5*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, 202, res.status)
		require.Equal(t, "old server", res.excerpt)
		require.Zero(t, idleConns(s), "HTTP/1.0: not kept idle")
	}
	require.Equal(t, int64(2), conns.Load(), "no reuse after an HTTP/1.0 answer")
}

// The lean client dials through the SSRF guard.
func TestLeanKeepsTheGuard(t *testing.T) {
	t.Parallel()
	srv := newLeanServer(t, func(http.ResponseWriter, *http.Request) {})
	s := leanSender(t, func(c *Config) { c.AllowPrivateNetworks = false })
	res := s.send(context.Background(), target(srv.URL), leanDelivery, 5*time.Second)
	require.True(t, errors.Is(res.err, ssrf.ErrRefused), "%v", res.err)
	require.Equal(t, int64(0), srv.conns.Load())
}

// https stays on net/http (HTTP/2 by ALPN), as does every request through
// an egress proxy.
func TestLeanServesPlainHTTPOnly(t *testing.T) {
	t.Parallel()
	var c preparedCache
	require.Nil(t, c.get(Target{ID: "a", URL: "https://127.0.0.1:1/", Secrets: []string{leanSecret}}).lean)
	require.NotNil(t, c.get(Target{ID: "b", URL: "http://127.0.0.1:1/", Secrets: []string{leanSecret}}).lean)
	require.Nil(t, proxiedSender(t, "http://127.0.0.1:1", true).lean)
}

// Header values net/http refuses are refused too: no header injection.
func TestLeanRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	srv := newLeanServer(t, func(http.ResponseWriter, *http.Request) {})
	s := leanSender(t, nil)
	d := &delivery.Delivery{ID: "dlv_1", EventID: "evt_1\r\nX-Injected: 1", Body: []byte(`{}`)}
	res := s.send(context.Background(), target(srv.URL), d, 5*time.Second)
	require.Error(t, res.err)
	require.Equal(t, int64(0), srv.conns.Load())
}

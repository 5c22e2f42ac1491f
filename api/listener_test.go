package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/wait"
)

// listening is a Server running on 127.0.0.1 with a test route, POST
// /echo, that reads its whole body and answers its length.
type listening struct {
	srv    *Server
	reg    *prometheus.Registry
	echoes atomic.Int64 // requests that reached /echo
}

func listen(t testing.TB, cfg Config) *listening {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	l := &listening{reg: prometheus.NewRegistry()}
	routes := func(mux *http.ServeMux) {
		mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
			l.echoes.Add(1)
			b, err := io.ReadAll(r.Body)
			var tooBig *http.MaxBytesError
			switch {
			case errors.As(err, &tooBig):
				writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", err.Error())
			case err != nil:
				writeError(w, http.StatusBadRequest, "bad_body", err.Error())
			default:
				writeJSON(w, http.StatusOK, map[string]int{"len": len(b)})
			}
		})
	}
	srv, err := Listen(cfg, Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: l.reg, Registerer: l.reg, Routes: routes})
	require.NoError(t, err)
	l.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return l
}

// dialFrom opens a connection from a loopback address of its own
// (127.0.0.2, ...): a client of its own for the per-client cap.
func (l *listening) dialFrom(t testing.TB, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", l.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func (l *listening) open() float64 {
	return float64(l.srv.ln.(*connLimits).open())
}

func (l *listening) refused(reason string) float64 {
	return testutil.ToFloat64(l.srv.ln.(*connLimits).refused.WithLabelValues(reason))
}

// get asks path from 127.0.0.1 on a connection of its own; 0 when the
// connection is refused or closed.
func (l *listening) get(path string) int {
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	res, err := cl.Get("http://" + l.srv.Addr() + path)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// closedByServer waits up to within for the server to close c (EOF or
// reset), reading and dropping whatever it answered first; it fails on a
// connection still open at the deadline.
func closedByServer(t testing.TB, c net.Conn, within time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection from %s still open after %s", c.LocalAddr(), within)
	}
}

// The finding: anyone who reached --listen could open connections
// until the process ran out of file descriptors. Now one client is held at
// its cap while others are served, everyone is held at the total cap, the
// connections beyond are closed at once and counted, and the server serves
// again when they close.
func TestConnectionCapsRefuseThenRecover(t *testing.T) {
	t.Parallel()
	l := listen(t, Config{MaxConns: 8, MaxConnsPerClient: 4})
	var held []net.Conn
	for range 4 {
		held = append(held, l.dialFrom(t, "127.0.0.2"))
	}
	wait.For(t, 10*time.Second, "4 open connections", func() bool { return l.open() == 4 })
	closedByServer(t, l.dialFrom(t, "127.0.0.2"), 10*time.Second)
	require.Equal(t, 1.0, l.refused(refusedMaxConnsPerClient))
	require.Equal(t, http.StatusOK, l.get("/readyz"), "another client is served")
	// The /readyz connection gives its place back before the next ones
	// are counted.
	wait.For(t, 10*time.Second, "4 open connections", func() bool { return l.open() == 4 })

	for range 4 {
		held = append(held, l.dialFrom(t, "127.0.0.3"))
	}
	wait.For(t, 10*time.Second, "8 open connections", func() bool { return l.open() == 8 })
	closedByServer(t, l.dialFrom(t, "127.0.0.4"), 10*time.Second)
	require.Equal(t, 0, l.get("/healthz"), "nobody is served at the total cap")
	require.Equal(t, 2.0, l.refused(refusedMaxConns))

	for _, c := range held {
		c.Close()
	}
	wait.For(t, 10*time.Second, "served again", func() bool { return l.get("/readyz") == http.StatusOK })
	wait.For(t, 10*time.Second, "no open connection", func() bool { return l.open() == 0 })
}

// The finding: 800 idle keep-alive connections and slow bodies were
// all still open after 35s. Now 20 of each are closed by the server once
// the idle and read timeouts pass, and hold no place afterwards.
func TestIdleAndSlowConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	l := listen(t, Config{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	var idle, slow []net.Conn
	for range 20 {
		c := l.dialFrom(t, "127.0.0.1")
		_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: hookd\r\n\r\n")
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.False(t, res.Close, "a keep-alive connection")
		idle = append(idle, c)
	}
	for range 20 {
		c := l.dialFrom(t, "127.0.0.1")
		_, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: hookd\r\nContent-Length: 1000\r\n\r\nfirst bytes of a body that never ends")
		require.NoError(t, err)
		slow = append(slow, c)
	}
	started := time.Now()
	for _, c := range append(idle, slow...) {
		closedByServer(t, c, 10*time.Second)
	}
	t.Logf("40 connections closed by the server in %s", time.Since(started).Round(time.Millisecond))
	wait.For(t, 10*time.Second, "no open connection", func() bool { return l.open() == 0 })
}

// Request bodies are bounded before any handler runs, authentication
// included: a declared length beyond MaxBodyBytes answers 413 and closes
// the connection without reading the body, and a chunked body stops being
// read at the limit.
func TestBodiesAreBoundedBeforeHandlers(t *testing.T) {
	t.Parallel()
	l := listen(t, Config{MaxBodyBytes: 1 << 10})
	c := l.dialFrom(t, "127.0.0.1")
	_, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: hookd\r\nContent-Length: 10485760\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)
	require.True(t, res.Close, "Connection: close")
	require.Zero(t, l.echoes.Load(), "the handler never ran")
	closedByServer(t, c, 10*time.Second)

	post := func(body io.Reader) int {
		res, err := http.Post("http://"+l.srv.Addr()+"/echo", "text/plain", body)
		require.NoError(t, err)
		defer res.Body.Close()
		return res.StatusCode
	}
	// io.MultiReader hides the length: the body goes chunked.
	require.Equal(t, http.StatusRequestEntityTooLarge, post(io.MultiReader(strings.NewReader(strings.Repeat("x", 4<<10)))))
	require.Equal(t, http.StatusOK, post(strings.NewReader(strings.Repeat("x", 1<<10))))
}

func TestListenRefusesBadLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxConns: -1}, "listen max conns: must be at least 1, got -1"},
		{Config{MaxConns: 8, MaxConnsPerClient: 9}, "listen max conns per client: must be 1..8 (max conns), got 9"},
		{Config{IdleTimeout: -time.Second}, "listen idle timeout: must be at least 1ms, got -1s"},
		{Config{MaxBodyBytes: -1}, "listen max body bytes: must be at least 1, got -1"},
	} {
		tc.cfg.Listen = "127.0.0.1:0"
		_, err := Listen(tc.cfg, Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry()})
		require.EqualError(t, err, tc.want, fmt.Sprintf("%+v", tc.cfg))
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.1:443":              "192.0.2.1",
		"[::ffff:192.0.2.1]:443":     "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2::9]:1":        "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
	} {
		ap, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		require.Equal(t, want, clientKey(ap), addr)
	}
}

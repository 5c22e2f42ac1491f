package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/delivery"
)

// connectProxy is a loopback HTTP CONNECT proxy: it records each CONNECT
// target and tunnels it to the test's receiver, whatever the target (a
// public address in the tests is never dialled).
type connectProxy struct {
	mu       sync.Mutex
	targets  []string
	auth     []string
	upstream string // where tunnels really go
	srv      *httptest.Server
}

func newConnectProxy(t *testing.T, upstream string) *connectProxy {
	p := &connectProxy{upstream: upstream}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *connectProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, r.Host)
	p.auth = append(p.auth, r.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, _ = io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { _, _ = io.Copy(up, rw.Reader); up.Close() }()
	_, _ = io.Copy(conn, up)
	conn.Close()
}

func (p *connectProxy) seen() ([]string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...), append([]string(nil), p.auth...)
}

type fakeDNS map[string]string

func (m fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func proxiedSender(t *testing.T, proxy string, allowPrivate bool, mutate ...func(*Config)) *sender {
	u, err := ParseEgressProxy(proxy)
	require.NoError(t, err)
	cfg := Config{EgressProxy: u, AllowPrivateNetworks: allowPrivate, ConnectTimeout: 5 * time.Second,
		resolver: fakeDNS{"hooks.example.com": "93.184.215.14", "internal.example.com": "10.1.2.3"}}
	for _, m := range mutate {
		m(&cfg)
	}
	cfg.setDefaults()
	s := newSender(cfg)
	t.Cleanup(s.closeIdle)
	return s
}

var proxyTestDelivery = &delivery.Delivery{ID: "dlv_1", EventID: "evt_1", Body: []byte(`{"x":1}`)}

// Webhook requests go through --egress-proxy, and the SSRF guard still
// checks the destination: a public one is tunnelled to its checked IP (not
// its name), a private one is refused before the proxy is contacted.
func TestEgressProxyCarriesRequestsAndKeepsTheGuard(t *testing.T) {
	t.Parallel()
	var received int
	var mu sync.Mutex
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received++
		mu.Unlock()
		require.NotEmpty(t, r.Header.Get("Webhook-Signature"))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	proxy := newConnectProxy(t, rcv.Listener.Addr().String())
	s := proxiedSender(t, "http://hookd:s3cret@"+proxy.srv.Listener.Addr().String(), false)
	target := Target{ID: "ep_1", URL: "http://hooks.example.com:8443/hook", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}

	for range 3 {
		res := s.send(context.Background(), target, proxyTestDelivery, 5*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, http.StatusNoContent, res.status)
	}
	targets, auth := proxy.seen()
	require.NotEmpty(t, targets, "the requests went through the proxy")
	require.Equal(t, "93.184.215.14:8443", targets[0], "CONNECT names the checked IP, not the host name")
	require.Equal(t, "Basic aG9va2Q6czNjcmV0", auth[0], "hookd:s3cret")
	mu.Lock()
	require.Equal(t, 3, received)
	mu.Unlock()

	before := len(targets)
	for _, u := range []string{"http://internal.example.com/hook", "http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://169.254.169.254/latest"} {
		target.URL = u
		res := s.send(context.Background(), target, proxyTestDelivery, 5*time.Second)
		require.ErrorIs(t, res.err, ssrf.ErrRefused, u)
		var re *ssrf.RefusedError
		require.True(t, errors.As(res.err, &re), u)
	}
	targets, _ = proxy.seen()
	require.Len(t, targets, before, "a refused destination never reaches the proxy")
}

// With --allow-private-networks a loopback receiver is reached through the
// proxy too (the proxy really dials it).
func TestEgressProxyAllowPrivate(t *testing.T) {
	t.Parallel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(rcv.Close)
	proxy := newConnectProxy(t, rcv.Listener.Addr().String())
	s := proxiedSender(t, proxy.srv.URL, true)
	res := s.send(context.Background(), Target{ID: "ep_1", URL: rcv.URL + "/hook", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
		proxyTestDelivery, 5*time.Second)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.status)
	targets, auth := proxy.seen()
	require.Equal(t, []string{rcv.Listener.Addr().String()}, targets)
	require.Equal(t, []string{""}, auth)
}

// A refusing proxy is a failed attempt naming the proxy's answer.
func TestEgressProxyRefusal(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusProxyAuthRequired)
	}))
	t.Cleanup(refusing.Close)
	s := proxiedSender(t, refusing.URL, false)
	res := s.send(context.Background(), Target{ID: "ep_1", URL: "https://hooks.example.com/hook", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
		proxyTestDelivery, 5*time.Second)
	var pe *ProxyError
	require.ErrorAs(t, res.err, &pe)
	require.Equal(t, http.StatusProxyAuthRequired, pe.Status)
}

func TestParseEgressProxy(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                          "",
		"http://10.0.0.1:3128":      "",
		"http://u:p@proxy.lan:3128": "",
		"https://proxy:3128":        "must be http://host:port",
		"socks5://proxy:1080":       "must be http://host:port",
		"http://proxy":              "needs a host and a port",
		"http://proxy:3128/path":    "no path",
	} {
		_, err := ParseEgressProxy(raw)
		if want == "" {
			require.NoError(t, err, raw)
			continue
		}
		require.ErrorContains(t, err, want, raw)
	}
	_, err := ParseEgressProxy("http://u:secret@proxy")
	require.NotContains(t, err.Error(), "secret", "the password is not printed")
}

// Each attempt is one log line (endpoint, event id, status, duration): at
// debug by default, at info with --log-deliveries.
func TestDeliveryAttemptsAreLogged(t *testing.T) {
	t.Parallel()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	t.Cleanup(rcv.Close)
	cfg := Config{AllowPrivateNetworks: true}
	cfg.setDefaults()
	target := Target{ID: "ep_log", URL: rcv.URL, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
	for _, c := range []struct {
		level  slog.Level
		atInfo bool
		lines  int
	}{{slog.LevelInfo, false, 0}, {slog.LevelDebug, false, 1}, {slog.LevelInfo, true, 1}} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level}))
		s := newSender(cfg).logging(log, c.atInfo)
		require.NoError(t, s.send(context.Background(), target, proxyTestDelivery, 5*time.Second).err)
		out := buf.String()
		require.Equal(t, c.lines, strings.Count(out, "\n"), out)
		if c.lines > 0 {
			for _, want := range []string{`msg="delivery attempt"`, "endpoint_id=ep_log", "event_id=evt_1", "delivery_id=dlv_1", "status=202", "duration_ms="} {
				require.Contains(t, out, want)
			}
		}
	}
}

package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/tlstest"
)

// https through --egress-proxy: TLS runs inside the CONNECT tunnel, to
// the checked IP, with the endpoint's host name as SNI and HTTP/2 by ALPN;
// the guard still refuses a private destination before the proxy.
func TestEgressProxyCarriesHTTPS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	var mu sync.Mutex
	var sni []string
	var protos []int
	rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sni, protos = append(sni, r.TLS.ServerName), append(protos, r.ProtoMajor)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	rcv.TLS = tlstest.ServerConfig(ca.Server(t, "hooks.example.com"), nil)
	rcv.EnableHTTP2 = true
	rcv.StartTLS()
	t.Cleanup(rcv.Close)
	proxy := newConnectProxy(t, rcv.Listener.Addr().String())
	s := proxiedSender(t, proxy.srv.URL, false, func(c *Config) { c.endpointRoots = ca.Pool })
	target := Target{ID: "ep_1", URL: "https://hooks.example.com:8443/hook", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
	for range 3 {
		res := s.send(context.Background(), target, proxyTestDelivery, 5*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, http.StatusNoContent, res.status)
	}
	targets, _ := proxy.seen()
	require.Equal(t, []string{"93.184.215.14:8443"}, targets, "one tunnel to the checked IP, its connection reused")
	mu.Lock()
	require.Equal(t, []string{"hooks.example.com", "hooks.example.com", "hooks.example.com"}, sni)
	require.Equal(t, []int{2, 2, 2}, protos)
	mu.Unlock()

	target.URL = "https://internal.example.com/hook"
	res := s.send(context.Background(), target, proxyTestDelivery, 5*time.Second)
	require.True(t, errors.Is(res.err, ssrf.ErrRefused), "%v", res.err)
	targets, _ = proxy.seen()
	require.Len(t, targets, 1, "a refused destination never reaches the proxy")
}

// The SSRF guard refuses a loopback https endpoint at dial time, before
// any TLS.
func TestHTTPSKeepsTheGuard(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rcv.TLS = tlstest.ServerConfig(ca.Server(t, "localhost"), nil)
	rcv.StartTLS()
	t.Cleanup(rcv.Close)
	s := testSender(t, func(c *Config) { c.AllowPrivateNetworks, c.endpointRoots = false, ca.Pool })
	res := s.send(context.Background(), target(rcv.URL), sendDelivery, 5*time.Second)
	require.True(t, errors.Is(res.err, ssrf.ErrRefused), "%v", res.err)
}

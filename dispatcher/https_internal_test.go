package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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

// sslCertFileChild is set in the child process of
// TestHTTPSSystemRootsFromSSLCertFile to the URL it must deliver to.
const sslCertFileChild = "HOOKD_TEST_SSL_CERT_FILE_URL"

// The operator's other way to trust a private CA: SSL_CERT_FILE replaces
// the system roots (read once per process, hence a child process), and a
// sender without EndpointCAFile trusts the receiver; without it, the same
// receiver is a tls_error.
func TestHTTPSSystemRootsFromSSLCertFile(t *testing.T) {
	if u := os.Getenv(sslCertFileChild); u != "" {
		res := testSender(t, nil).send(context.Background(), target(u), sendDelivery, 10*time.Second)
		require.NoError(t, res.err)
		require.Equal(t, http.StatusAccepted, res.status)
		return
	}
	t.Parallel()
	ca := tlstest.NewCA(t)
	rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	rcv.TLS = tlstest.ServerConfig(ca.Server(t, "localhost"), nil)
	rcv.StartTLS()
	t.Cleanup(rcv.Close)

	res := testSender(t, nil).send(context.Background(), target(rcv.URL), sendDelivery, 10*time.Second)
	require.Equal(t, ClassTLS, Classify(res.status, res.err, 0, 0).ErrorClass, "not trusted without SSL_CERT_FILE: %v", res.err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHTTPSSystemRootsFromSSLCertFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+ca.File, "SSL_CERT_DIR=", sslCertFileChild+"="+rcv.URL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child delivers with SSL_CERT_FILE:\n%s", out)
	require.Contains(t, string(out), "PASS")
}

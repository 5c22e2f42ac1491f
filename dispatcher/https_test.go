package dispatcher_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/tlstest"
)

// tlsSeen is what a TLS receiver saw of one request.
type tlsSeen struct {
	protoMajor int
	serverName string
	resumed    bool
}

// tlsReceiver is a net/http receiver serving https on 127.0.0.1 with a
// certificate for localhost; h2 offers HTTP/2 by ALPN, otherwise it
// speaks HTTP/1.1 only.
type tlsReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string]tlsSeen // by webhook-id
}

func newTLSReceiver(t *testing.T, cert tlstest.Cert, h2 bool, mutate func(*tls.Config, *http.Server)) *tlsReceiver {
	t.Helper()
	rc := &tlsReceiver{seen: map[string]tlsSeen{}}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.seen[r.Header.Get("Webhook-Id")] = tlsSeen{protoMajor: r.ProtoMajor, serverName: r.TLS.ServerName, resumed: r.TLS.DidResume}
		rc.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	rc.srv.TLS = tlstest.ServerConfig(cert, nil)
	rc.srv.EnableHTTP2 = h2
	if mutate != nil {
		mutate(rc.srv.TLS, rc.srv.Config)
	}
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *tlsReceiver) get(id string) (tlsSeen, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s, ok := rc.seen[id]
	return s, ok
}

// localhostURL is rc's URL by the name its certificate carries.
func (rc *tlsReceiver) localhostURL() string {
	return fmt.Sprintf("https://localhost:%d/hook", rc.srv.Listener.Addr().(*net.TCPAddr).Port)
}

// deliverAll produces n deliveries to endpoint ep and waits for their
// first attempt records.
func deliverAll(t *testing.T, b *bundle, ep string, n int) []*attempt.Record {
	t.Helper()
	var ds []*delivery.Delivery
	for i := range n {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_%s_%d", ep, i), ep))
	}
	b.produce(-1, ds...)
	out := make([]*attempt.Record, n)
	for i, d := range ds {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) > 0 }, "attempt of %s", d.ID)
		out[i] = b.col.attemptsFor(d.ID)[0]
	}
	return out
}

// TestHTTPSDelivers: https endpoints whose certificates a private CA
// signed (trusted through EndpointCAFile), one receiver offering HTTP/2,
// one HTTP/1.1 only: both delivered, over the protocol each offers, with
// the endpoint's host name sent as SNI.
func TestHTTPSDelivers(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	cert := ca.Server(t, "localhost")
	h2 := newTLSReceiver(t, cert, true, nil)
	h1 := newTLSReceiver(t, cert, false, nil)
	b := setup(t, setupOpts{})
	b.eps.set(dispatcher.Target{ID: "ep_h2", URL: h2.localhostURL()})
	b.eps.set(dispatcher.Target{ID: "ep_h1", URL: h1.localhostURL()})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, EndpointCAFile: ca.File}, runOpts{})

	for _, c := range []struct {
		ep    string
		rc    *tlsReceiver
		proto int
	}{{"ep_h2", h2, 2}, {"ep_h1", h1, 1}} {
		for _, a := range deliverAll(t, b, c.ep, 5) {
			require.Equal(t, attempt.OutcomeDelivered, a.Outcome, "%s: %s %s", c.ep, a.ErrorClass, a.Error)
			require.Equal(t, 200, a.StatusCode)
			require.Equal(t, "ok", a.ResponseExcerpt)
			seen, ok := c.rc.get(a.EventID)
			require.True(t, ok)
			require.Equal(t, c.proto, seen.protoMajor, "%s: HTTP/%d", c.ep, c.proto)
			require.Equal(t, "localhost", seen.serverName, "SNI is the endpoint's host name")
		}
	}
}

// TestHTTPSBadCertificate: a certificate of a CA hookd does not trust is
// a failed attempt of class tls_error, retried; the receiver's handler
// never runs.
func TestHTTPSBadCertificate(t *testing.T) {
	t.Parallel()
	trusted, other := tlstest.NewCA(t), tlstest.NewCA(t)
	rc := newTLSReceiver(t, other.Server(t, "localhost"), true, nil)
	b := setup(t, setupOpts{})
	b.eps.set(dispatcher.Target{ID: "ep_bad", URL: rc.localhostURL()})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, EndpointCAFile: trusted.File}, runOpts{})
	a := deliverAll(t, b, "ep_bad", 1)[0]
	require.Equal(t, attempt.OutcomeRetry, a.Outcome)
	require.Equal(t, dispatcher.ClassTLS, a.ErrorClass, a.Error)
	require.Zero(t, a.StatusCode)
	_, ok := rc.get(a.EventID)
	require.False(t, ok, "no request reached the handler")
}

// TestHTTPSTLSSessions: a receiver that closes every connection after its
// answer makes a handshake per request: hookd resumes the TLS session for
// all but the first; a receiver that disables session tickets gets full
// handshakes and every delivery all the same.
func TestHTTPSTLSSessions(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	cert := ca.Server(t, "localhost")
	noKeepAlive := func(_ *tls.Config, s *http.Server) { s.SetKeepAlivesEnabled(false) }
	resuming := newTLSReceiver(t, cert, false, noKeepAlive)
	dropping := newTLSReceiver(t, cert, false, func(c *tls.Config, s *http.Server) {
		c.SessionTicketsDisabled = true
		noKeepAlive(c, s)
	})
	b := setup(t, setupOpts{})
	b.eps.set(dispatcher.Target{ID: "ep_resume", URL: resuming.localhostURL(), MaxInFlight: 1})
	b.eps.set(dispatcher.Target{ID: "ep_drop", URL: dropping.localhostURL(), MaxInFlight: 1})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, EndpointCAFile: ca.File}, runOpts{})

	for _, c := range []struct {
		ep      string
		rc      *tlsReceiver
		resumed int
	}{{"ep_resume", resuming, 4}, {"ep_drop", dropping, 0}} {
		resumed := 0
		for i, a := range deliverAll(t, b, c.ep, 5) {
			require.Equal(t, attempt.OutcomeDelivered, a.Outcome, "%s %d: %s %s", c.ep, i, a.ErrorClass, a.Error)
			seen, _ := c.rc.get(a.EventID)
			if seen.resumed {
				resumed++
			}
		}
		require.Equal(t, c.resumed, resumed, "%s: resumed handshakes of 5", c.ep)
	}
}

// TestHTTPSEndpointCAFile: the bundle is added to the system roots; an
// unreadable file, one without a certificate, or with a block that is not
// one, is New's one-line error.
func TestHTTPSEndpointCAFile(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	pool, err := dispatcher.LoadEndpointCAs(ca.File)
	require.NoError(t, err)
	_, err = ca.Server(t, "localhost").TLS.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"})
	require.NoError(t, err, "the bundle's CA is trusted")

	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	caPEM, err := os.ReadFile(ca.File)
	require.NoError(t, err)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.pem"), "no such file"},
		{write("empty.pem", "\n"), "no certificate"},
		{write("text.pem", "not pem"), "not a PEM certificate bundle"},
		{write("key.pem", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), `"EC PRIVATE KEY", not a CERTIFICATE`},
		{write("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "certificate 1:"},
		{write("tail.pem", string(caPEM)+"garbage"), "after 1 certificates"},
	} {
		_, err := dispatcher.LoadEndpointCAs(c.path)
		require.ErrorContains(t, err, c.want, c.path)
		_, err = dispatcher.New(dispatcher.Config{EndpointCAFile: c.path}, dispatcher.Deps{Endpoints: &endpointMap{}})
		require.ErrorContains(t, err, "dispatcher endpoint CA file: ", c.path)
		require.NotContains(t, err.Error(), "\n")
	}
}

// TestHostileTLSReceivers: the hostile-receiver suite over TLS (HTTP/1.1
// by ALPN, crafted bytes inside the TLS stream).
func TestHostileTLSReceivers(t *testing.T) {
	// Not parallel with the other tests: the goroutine and heap peaks are
	// the process's.
	ca := tlstest.NewCA(t)
	srvTLS := tlstest.ServerConfig(ca.Server(t, "localhost"), nil)
	srvTLS.NextProtos = []string{"http/1.1"}
	runHostile(t, srvTLS, "https", hostileCases, func(c *dispatcher.Config) { c.EndpointCAFile = ca.File })
}

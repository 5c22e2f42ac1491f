package hookbench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/bench/chaos"
	"github.com/hookd/hookd/internal/endpoint"
)

// setupTLSReceiver starts a chaos receiver serving https with the run's
// certificate and connection counters, and one endpoint on it.
func setupTLSReceiver(t *testing.T) (*bench, *connStats, *endpointInfo) {
	t.Helper()
	rt, err := newReceiverTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := newConnStats()
	rc, err := chaos.StartReceiver(chaos.ReceiverOptions{TLS: rt.serverConfig(st), ConnState: st.connState})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	e := &endpointInfo{ID: "ep_1", Account: "acct_1", Secret: endpoint.NewSecret(), rc: rc}
	if e.URL, err = rc.Add(chaos.EndpointSpec{ID: e.ID, Secret: e.Secret, Behave: chaos.BehaveOK}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.URL, "https://127.0.0.1:") {
		t.Fatalf("endpoint URL %q, want https://127.0.0.1:...", e.URL)
	}
	return &bench{tls: rt, cfg: &Config{}}, st, e
}

func mustPost(t *testing.T, cl *http.Client, e *endpointInfo, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !post(ctx, cl, e, id, benchBody(id)) {
		t.Fatalf("POST %s to %s: no 2xx", id, e.URL)
	}
}

// The CA file is what SSL_CERT_FILE points the hookd processes at: it
// must verify the receivers' certificate for 127.0.0.1 and localhost.
func TestReceiverTLSCAFileVerifiesTheReceivers(t *testing.T) {
	t.Parallel()
	rt, err := newReceiverTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(rt.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", rt.CAFile)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		t.Fatal("CA file not accepted by AppendCertsFromPEM")
	}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := rt.cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("receivers' certificate for %s: %v", name, err)
		}
	}
	if _, err := rt.cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"}); err == nil {
		t.Error("receivers' certificate verified for example.com")
	}
}

// B0's client speaks HTTP/2 to the receivers, keeps one connection, and
// a second transport sharing the session cache resumes the session:
// each is counted once, in the right column.
func TestReceiverCountsConnectionsAndHandshakes(t *testing.T) {
	t.Parallel()
	b, st, e := setupTLSReceiver(t)
	cl := b.newHTTPClient()
	for i := range 5 {
		mustPost(t, cl, e, "h2_"+string(rune('a'+i)))
	}
	if s := st.snapshot(); s.opened != 1 || s.full != 1 || s.resumed != 0 || s.protos["h2"] != 1 {
		t.Fatalf("after 5 requests on one client: %+v, want 1 connection, 1 full handshake over h2", s)
	}
	tr2 := cl.Transport.(*http.Transport).Clone() // shares the ClientSessionCache
	mustPost(t, &http.Client{Transport: tr2}, e, "resumed")
	if s := st.snapshot(); s.opened != 2 || s.full != 1 || s.resumed != 1 {
		t.Fatalf("after a second transport with the same session cache: %+v, want 2 connections, 1 full + 1 resumed", s)
	}
	// A client that offers only HTTP/1.1 gets it (a custom TLS config
	// without ForceAttemptHTTP2 turns net/http's HTTP/2 off).
	tr1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.tls.Pool}}
	defer tr1.CloseIdleConnections()
	mustPost(t, &http.Client{Transport: tr1}, e, "http1")
	if s := st.snapshot(); s.opened != 3 || s.full != 2 || s.protos["http/1.1 (no ALPN)"] != 1 {
		t.Fatalf("after an HTTP/1.1-only client: %+v, want 3 connections, 2 full handshakes, one HTTP/1.1 without ALPN", s)
	}
}

func TestOneHostPer1000AndMarkdown(t *testing.T) {
	t.Parallel()
	oh := &OneHost{Endpoints: 1000, Rate: 1000, WarmupS: 5, Deliveries: 20000, Requests: 20000}
	oh.count(connSnapshot{opened: 4, full: 4, peakOpen: 4},
		connSnapshot{opened: 7, closed: 2, full: 5, resumed: 1, peakOpen: 5, protos: map[string]int64{"h2": 6}}, true)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if oh.ConnsOpened != 3 || oh.Unshaken != 1 || !near(oh.ConnsPer1000, 0.15) || !near(oh.FullHandshakesPer1000, 0.05) ||
		!near(oh.ResumedHandshakesPer1000, 0.05) ||
		oh.WarmupConns != 4 || oh.OpenAtEnd != 5 {
		t.Fatalf("one host = %+v", oh)
	}
	r := &Results{OneHost: oh}
	r.Config.Scheme = SchemeHTTPS
	md := r.Markdown()
	for _, want := range []string{
		"over https (a CA of the run, trusted through SSL_CERT_FILE)",
		"| connections opened per 1,000 deliveries | 0.15 (3; 1 without a completed TLS handshake) | | |",
		"| TLS handshakes per 1,000 deliveries: full + resumed | 0.05 + 0.05 (1 + 1) | <= 1 | met |",
		"by ALPN protocol (over http: its connections) | h2 6 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// 30 handshakes in 20,000 deliveries is 1.5 per 1,000: over the goal.
	oh.count(connSnapshot{}, connSnapshot{opened: 30, full: 30}, true)
	if md := r.Markdown(); !strings.Contains(md, "| 1.50 + 0.00 (30 + 0) | <= 1 | **not met** |") {
		t.Errorf("30 handshakes per 20,000 deliveries not marked:\n%s", md)
	}
	// Over http there are no handshakes to count, and no goal.
	r.Config.Scheme = SchemeHTTP
	if md := r.Markdown(); strings.Contains(md, "TLS handshakes per") || !strings.Contains(md, "over http (") {
		t.Errorf("http run's markdown:\n%s", md)
	}
}

func TestParseSkip(t *testing.T) {
	t.Parallel()
	got, err := ParseSkip("b2", "onehost, b2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Phases {
		if want := p != "onehost"; got[p] != want {
			t.Errorf("--skip b2 --phases onehost,b2: skip[%s] = %v, want %v", p, got[p], want)
		}
	}
	if got, err := ParseSkip(" tenancy ,", ""); err != nil || len(got) != 1 || !got["tenancy"] {
		t.Errorf("--skip tenancy = %v, %v", got, err)
	}
	for _, bad := range [][2]string{{"saturaton", ""}, {"", "onehost,nope"}, {"", " , "}} {
		if _, err := ParseSkip(bad[0], bad[1]); err == nil {
			t.Errorf("ParseSkip(%q, %q) = nil error", bad[0], bad[1])
		}
	}
}

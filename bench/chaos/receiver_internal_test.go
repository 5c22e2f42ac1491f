package chaos

import (
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/internal/wait"
)

// OKCount is the number of (endpoint, webhook-id) pairs answered 2xx at
// least once: a retried id counts once, an id refused every time not at
// all. hookbench's progress line reads it every second instead of copying
// FirstOK.
func TestOKCountCountsFirst2xxPairs(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	r, err := StartReceiver(ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	okURL, err := r.Add(EndpointSpec{ID: "ok", Secret: secret, Behave: BehaveOK})
	if err != nil {
		t.Fatal(err)
	}
	badURL, err := r.Add(EndpointSpec{ID: "bad", Secret: secret, Behave: Behave5xx, FailAttempts: -1})
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	post := func(url, id string) int {
		body := `{"id":"` + id + `"}`
		now := time.Now()
		sig, err := wh.Sign(id, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		url, id string
		want    int
	}{{okURL, "evt_1", 200}, {okURL, "evt_1", 200}, {okURL, "evt_2", 200}, {badURL, "evt_1", 503}} {
		if got := post(c.url, c.id); got != c.want {
			t.Fatalf("POST %s %s: %d, want %d", c.url, c.id, got, c.want)
		}
	}
	if got, want := r.OKCount(), len(r.FirstOK()); got != 2 || want != 2 {
		t.Fatalf("OKCount %d, len(FirstOK) %d, want 2 and 2", got, want)
	}
}

// signedPost POSTs a signed webhook with c and returns the response, its
// body read.
func signedPost(t *testing.T, c *http.Client, url, secret, id string) (*http.Response, error) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"id":"` + id + `"}`
	now := time.Now()
	sig, err := wh.Sign(id, now, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// With ReceiverOptions.TLS the receiver serves https: HTTP/2 by ALPN, or
// HTTP/1.1 only when NextProtos says so; its behaviours that need a
// connection of their own (reset, slow bytes) still misbehave over HTTP/2.
func TestReceiverServesTLS(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ca := tlstest.NewCA(t)
	cert := ca.Server(t, "127.0.0.1")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	for _, c := range []struct {
		protos []string
		major  int
	}{{nil, 2}, {[]string{"http/1.1"}, 1}} {
		cfg := tlstest.ServerConfig(cert, nil)
		cfg.NextProtos = c.protos
		r, err := StartReceiver(ReceiverOptions{TLS: cfg, KeepRequests: true})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if !strings.HasPrefix(r.URL, "https://127.0.0.1:") {
			t.Fatalf("URL %q", r.URL)
		}
		okURL, _ := r.Add(EndpointSpec{ID: "ok", Secret: secret, Behave: BehaveOK})
		resetURL, _ := r.Add(EndpointSpec{ID: "reset", Secret: secret, Behave: BehaveReset, FailAttempts: -1})
		slowURL, _ := r.Add(EndpointSpec{ID: "slow", Secret: secret, Behave: BehaveSlowBytes, FailAttempts: -1})
		resp, err := signedPost(t, client, okURL, secret, "evt_1")
		if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != c.major {
			t.Fatalf("ok over %v: %v %v, want 200 over HTTP/%d", c.protos, resp, err, c.major)
		}
		if resp, err := signedPost(t, client, resetURL, secret, "evt_1"); err == nil {
			t.Fatalf("reset over %v answered %d", c.protos, resp.StatusCode)
		}
		resp, err = signedPost(t, client, slowURL, secret, "evt_1")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("slow over %v: %v %v", c.protos, resp, err)
		}
		// A request is recorded once its answer is written: the client
		// may have read it first.
		wait.For(t, 5*time.Second, "3 requests recorded", func() bool { return len(r.Requests()) == 3 })
		// Every connection accepted made one handshake (the server's side
		// of one may end after the client's).
		wait.For(t, 5*time.Second, "a handshake per connection", func() bool {
			full, resumed := r.TLSHandshakes()
			return full >= 1 && full+resumed == r.Conns()
		})
		reqs := r.Requests()
		if !reqs[0].SigOK {
			t.Fatalf("requests over %v: %+v", c.protos, reqs)
		}
	}
}

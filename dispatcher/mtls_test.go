package dispatcher_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/tlstest"
)

func pemOf(t *testing.T, c tlstest.Cert) (cert, key string) {
	t.Helper()
	cb, err := os.ReadFile(c.CertFile)
	require.NoError(t, err)
	kb, err := os.ReadFile(c.KeyFile)
	require.NoError(t, err)
	return string(cb), string(kb)
}

// TestMutualTLS: one receiver that requires a client certificate of its
// CA (HTTP/2, so one connection would carry every request to it if the
// pools were shared) and three endpoints on it: two with certificates of
// their own, one with none. Each request arrives with its own endpoint's
// certificate, interleaved as they are; the one without is refused at the
// handshake.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA := tlstest.NewCA(t), tlstest.NewCA(t)
	var mu sync.Mutex
	seen := map[string]string{} // webhook-id -> client certificate CN
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.Header.Get("Webhook-Id")] = r.TLS.PeerCertificates[0].Subject.CommonName
		mu.Unlock()
	}))
	srv.TLS = tlstest.ServerConfig(serverCA.Server(t, "localhost"), clientCA.Pool)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	endpointURL := "https://localhost:" + u.Port() + "/hook"

	certA, keyA := pemOf(t, clientCA.Client(t, "endpoint-a"))
	certB, keyB := pemOf(t, clientCA.Client(t, "endpoint-b"))
	b := setup(t, setupOpts{})
	b.eps.set(dispatcher.Target{ID: "ep_a", URL: endpointURL, ClientCert: certA, ClientKey: keyA})
	b.eps.set(dispatcher.Target{ID: "ep_b", URL: endpointURL, ClientCert: certB, ClientKey: keyB})
	b.eps.set(dispatcher.Target{ID: "ep_none", URL: endpointURL})
	b.start(dispatcher.Config{AllowPrivateNetworks: true, EndpointCAFile: serverCA.File}, runOpts{})

	var ds []*delivery.Delivery
	for i := range 10 {
		ds = append(ds, newDelivery(fmt.Sprintf("evt_a%d", i), "ep_a"), newDelivery(fmt.Sprintf("evt_b%d", i), "ep_b"))
	}
	b.produce(-1, ds...)
	for _, d := range ds {
		eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(d.ID)) > 0 }, "attempt of %s", d.ID)
		a := b.col.attemptsFor(d.ID)[0]
		require.Equal(t, attempt.OutcomeDelivered, a.Outcome, "%s: %s %s", d.ID, a.ErrorClass, a.Error)
		mu.Lock()
		cn := seen[d.EventID]
		mu.Unlock()
		require.Equal(t, map[string]string{"ep_a": "endpoint-a", "ep_b": "endpoint-b"}[d.EndpointID], cn,
			"%s was sent with another endpoint's certificate", d.ID)
	}

	none := newDelivery("evt_none", "ep_none")
	b.produce(-1, none)
	eventually(t, 20*time.Second, func() bool { return len(b.col.attemptsFor(none.ID)) > 0 }, "attempt of evt_none")
	a := b.col.attemptsFor(none.ID)[0]
	require.NotEqual(t, attempt.OutcomeDelivered, a.Outcome, "sent without a certificate: %s", a.Error)
	mu.Lock()
	_, got := seen[none.EventID]
	mu.Unlock()
	require.False(t, got)
}

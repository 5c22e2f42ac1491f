package main_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher/signature"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/secretbox"
)

// signedRequest is what a receiver got: the signature headers and the body.
type signedRequest struct {
	path, id, ts, sig string
	body              []byte
}

func newKey(t *testing.T) (b64, id string) {
	t.Helper()
	raw := make([]byte, secretbox.KeySize)
	_, _ = rand.Read(raw)
	return base64.StdEncoding.EncodeToString(raw), secretbox.KeyID(raw)
}

// storedSecrets is the secrets column of endpoint id, as Postgres holds it.
func storedSecrets(t *testing.T, db *pgtest.DB, id string) []string {
	t.Helper()
	var v []string
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT secrets FROM webhooks.endpoints WHERE id = $1`, id).Scan(&v))
	return v
}

// TestSecretsAtRest takes a plain-text installation to encrypted secrets
// online, from the binaries: a hookd run given a key (from a file) seals
// new endpoints, `hookd secrets rotate-key` seals the old ones while it
// runs, deliveries are still signed with the right secrets, and every
// process refuses to start without the key.
func TestSecretsAtRest(t *testing.T) {
	t.Parallel()
	hookd := proctest.Binary(t, "hookd")
	hookctl := proctest.Binary(t, "hookctl")
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	got := make(chan signedRequest, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- signedRequest{r.URL.Path, r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body}
	}))
	defer recv.Close()

	// Before: an installation without a key, secrets in plain text.
	plainSecret := endpoint.NewSecret()
	_, err := db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_old", Account: "acct_1", URL: recv.URL + "/old", Secrets: []string{plainSecret}})
	require.NoError(t, err)
	require.Equal(t, []string{plainSecret}, storedSecrets(t, db, "ep_old"))

	key, keyID := newKey(t)
	keyFile := filepath.Join(t.TempDir(), "secrets-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("# hookd secrets key\n"+key+"\n"), 0o600))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	env := []string{"DATABASE_URL=" + db.URL, "HOOKD_DATA_DIR=" + filepath.Join(t.TempDir(), "data"), "HOOKD_KAFKA_LISTEN=" + kafkaAddr,
		"HOOKD_LISTEN=" + httpAddr, "HOOKD_PARTITIONS=3", "HOOKD_RELAY_SLOT=" + db.Name, "HOOKD_ADMIN_TOKEN=admin-token-for-tests",
		"HOOKD_ALLOW_PRIVATE_NETWORKS=true", "HOOKD_RETRY_SCHEDULE=1s,2s"}

	code, _, stderr := proctest.Run(t, 30*time.Second, hookd, []string{"DATABASE_URL=" + db.URL}, "secrets", "rotate-key")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "no secrets key given")

	p := proctest.Start(t, hookd, append(env, "HOOKD_SECRETS_KEY_FILE="+keyFile), "run", "--log-level", "debug")
	p.WaitReady(httpAddr, 60*time.Second)

	// A new endpoint is sealed; the old one still reads in plain text.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/v1/endpoints", strings.NewReader(
		`{"id":"ep_new","account":"acct_1","url":"`+recv.URL+`/new","event_types":["*"]}`))
	req.Header.Set("Authorization", "Bearer admin-token-for-tests")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var created struct{ Secret string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.True(t, strings.HasPrefix(created.Secret, "whsec_"), created.Secret)
	stored := storedSecrets(t, db, "ep_new")
	require.Len(t, stored, 1)
	require.True(t, strings.HasPrefix(stored[0], "v1:"+keyID+":"), "stored %q", stored[0])
	require.NotContains(t, stored[0], strings.TrimPrefix(created.Secret, "whsec_"))

	// The plain-text one is sealed online, hookd running.
	code, out, stderr := proctest.Run(t, 30*time.Second, hookd, []string{"DATABASE_URL=" + db.URL, "HOOKD_SECRETS_KEY=" + key}, "secrets", "rotate-key")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "endpoints: 2; encrypted from plain text: 1; re-encrypted from older keys: 0; already under key "+keyID+": 1")
	stored = storedSecrets(t, db, "ep_old")
	require.True(t, strings.HasPrefix(stored[0], "v1:"+keyID+":"), "stored %q", stored[0])
	code, out, _ = proctest.Run(t, 30*time.Second, hookd, []string{"DATABASE_URL=" + db.URL, "HOOKD_SECRETS_KEY=" + key}, "secrets", "status")
	require.Equal(t, 0, code)
	require.Equal(t, "plain text: 0\nkey "+keyID+": 2\n", out)

	// Deliveries are signed with each endpoint's own secret.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "webhooks.events", Value: []byte(`{"account":"acct_1","type":"order.paid","data":{"n":1}}`)}).FirstErr())
	secrets := map[string]string{"/old": plainSecret, "/new": created.Secret}
	for len(secrets) > 0 {
		var r signedRequest
		select {
		case r = <-got:
		case <-ctx.Done():
			t.Fatalf("deliveries not received; hookd stderr:\n%s", p.Stderr())
		}
		if !strings.Contains(string(r.body), `"order.paid"`) {
			continue // an operational event, not the one produced
		}
		plain, ok := secrets[r.path]
		require.True(t, ok, "unexpected or repeated delivery to %s", r.path)
		delete(secrets, r.path)
		sec, err := signature.ParseSecret(plain)
		require.NoError(t, err)
		unix, err := strconv.ParseInt(r.ts, 10, 64)
		require.NoError(t, err)
		require.Equal(t, signature.Sign(r.id, time.Unix(unix, 0), r.body, []signature.Secret{sec}), r.sig)
	}
	// Nothing secret in Kafka, /metrics or the log: neither the secrets, nor
	// the key, nor what Postgres holds.
	leaks := []string{strings.TrimPrefix(plainSecret, "whsec_"), strings.TrimPrefix(created.Secret, "whsec_"), key,
		storedSecrets(t, db, "ep_old")[0], storedSecrets(t, db, "ep_new")[0]}
	requireNoLeak(t, "kafka", topicsContent(t, ctx, kafkaAddr), leaks)
	resp, err = http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	requireNoLeak(t, "/metrics", string(metrics), leaks)
	p.Signal(syscall.SIGTERM)
	require.Equal(t, 0, p.Wait(30*time.Second), p.Stderr())
	requireNoLeak(t, "hookd's log", p.Stderr(), leaks)

	// hookctl reads them with the key, and says which key it lacks without.
	code, out, stderr = proctest.Run(t, 30*time.Second, hookctl, []string{"DATABASE_URL=" + db.URL, "HOOKD_SECRETS_KEY=" + key}, "endpoints", "show", "ep_old", "--show-secrets")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, plainSecret)
	code, _, stderr = proctest.Run(t, 30*time.Second, hookctl, []string{"DATABASE_URL=" + db.URL}, "endpoints", "show", "ep_old")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "ep_old: signing secret 1: key id "+keyID)

	// Without the key, or with another one, no process starts.
	otherKey, otherID := newKey(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"run without a key", nil, []string{"run"}, "key id " + keyID + " (2); none is given"},
		{"run with another key", []string{"HOOKD_SECRETS_KEY=" + otherKey}, []string{"run"}, "key id " + keyID + " (2); the keys given have id " + otherID},
		{"dispatch without a key", nil, []string{"dispatch", "--brokers", kafkaAddr}, "key id " + keyID + " (2); none is given"},
		{"api without a key", nil, []string{"api", "--brokers", kafkaAddr}, "key id " + keyID + " (2); none is given"},
		{"router without a key", nil, []string{"router", "--brokers", kafkaAddr}, "key id " + keyID + " (2); none is given"},
		{"bad key", []string{"HOOKD_SECRETS_KEY=" + key[:20]}, []string{"run"}, "--secrets-key: secrets key 1: must decode to 32 bytes"},
	} {
		code, _, stderr := proctest.Run(t, 30*time.Second, hookd, append(env, tc.env...), append(tc.args, "--log-level", "error")...)
		require.Equal(t, 2, code, "%s: %s", tc.name, stderr)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.Len(t, lines, 1, "%s: one line, got %q", tc.name, stderr)
		require.Contains(t, lines[0], tc.want, tc.name)
		require.NotContains(t, stderr, key[:20], tc.name)
	}
}

func requireNoLeak(t *testing.T, where, content string, leaks []string) {
	t.Helper()
	for i, l := range leaks {
		require.NotContains(t, content, l, "secret %d is in %s", i+1, where)
	}
}

// topicsContent is every record (key, value, headers) of hookd's topics, as text.
func topicsContent(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeRegex(), kgo.ConsumeTopics(`^webhooks\..*`),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var b strings.Builder
	n := 0
	// The records are there already: poll until a poll brings nothing new.
	for empty := 0; empty < 3; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		if fetches.NumRecords() == 0 {
			empty++
			continue
		}
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			b.Write(r.Key)
			b.Write(r.Value)
			for _, h := range r.Headers {
				b.WriteString(h.Key + "=" + string(h.Value))
			}
		})
	}
	require.GreaterOrEqual(t, n, 3, "the event, its deliveries and attempts")
	return b.String()
}

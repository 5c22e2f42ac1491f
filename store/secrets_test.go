package store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/secretbox"
	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/store"
)

// secretsBundle is one test database with stores opened on it under
// different keyrings (nil: no key).
type secretsBundle struct {
	db   *pgtest.DB
	logs *bytes.Buffer
	mu   sync.Mutex
}

func newSecretsBundle(t *testing.T) *secretsBundle {
	return &secretsBundle{db: pgtest.New(t), logs: &bytes.Buffer{}}
}

func (b *secretsBundle) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logs.Write(p)
}

func (b *secretsBundle) open(t *testing.T, keys ...[]byte) *store.Store {
	t.Helper()
	var ring *secretbox.Keyring
	if len(keys) > 0 {
		var err error
		ring, err = secretbox.NewKeyring(keys...)
		require.NoError(t, err)
	}
	logger := slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: b.db.URL, Secrets: ring}, logger)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// stored is what Postgres holds in the secrets column of endpoint id.
func (b *secretsBundle) stored(t *testing.T, id string) []string {
	t.Helper()
	var v []string
	require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(),
		`SELECT secrets FROM webhooks.endpoints WHERE id = $1`, id).Scan(&v))
	return v
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, secretbox.KeySize) }

func requireSealed(t *testing.T, stored []string, keyID string, plain ...string) {
	t.Helper()
	require.Len(t, stored, len(plain))
	for i, v := range stored {
		id, ok := secretbox.SealedKeyID(v)
		require.True(t, ok, "secret %d is stored in plain text", i+1)
		require.Equal(t, keyID, id, "secret %d", i+1)
		for _, p := range plain {
			require.NotContains(t, v, strings.TrimPrefix(p, "whsec_"))
		}
	}
}

func TestSecretsAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	st := b.open(t, key(1))
	ctx := context.Background()
	first, second := endpoint.NewSecret(), endpoint.NewSecret()

	created, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_1", Account: "acct_1", URL: "https://example.com/1", Secrets: []string{first}})
	require.NoError(t, err)
	require.Equal(t, []string{first}, created.Secrets)
	requireSealed(t, b.stored(t, "ep_1"), secretbox.KeyID(key(1)), first)

	// A rotation: new first, the previous one still signing.
	rotated, err := st.ModifyEndpoint(ctx, "ep_1", func(e *endpoint.Endpoint) error {
		e.Secrets = []string{second, e.Secrets[0]}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{second, first}, rotated.Secrets)
	requireSealed(t, b.stored(t, "ep_1"), secretbox.KeyID(key(1)), first, second)

	// Every read path gives the plain secrets.
	got, err := st.GetEndpoint(ctx, "ep_1")
	require.NoError(t, err)
	require.Equal(t, []string{second, first}, got.Secrets)
	for name, read := range map[string]func() ([]endpoint.Endpoint, error){
		"all":   func() ([]endpoint.Endpoint, error) { return st.AllEndpoints(ctx) },
		"by id": func() ([]endpoint.Endpoint, error) { return st.EndpointsByID(ctx, []string{"ep_1"}) },
		"list": func() ([]endpoint.Endpoint, error) {
			return st.ListEndpoints(ctx, store.ListEndpointsParams{Account: "acct_1"})
		},
	} {
		eps, err := read()
		require.NoError(t, err, name)
		require.Len(t, eps, 1, name)
		require.Equal(t, []string{second, first}, eps[0].Secrets, name)
	}

	// Without the key nothing reads, and the error says which key is missing.
	_, err = b.open(t).GetEndpoint(ctx, "ep_1")
	require.ErrorIs(t, err, secretbox.ErrUnknownKey)
	require.Contains(t, err.Error(), "ep_1")
	require.Contains(t, err.Error(), secretbox.KeyID(key(1)))
	_, err = b.open(t, key(2)).AllEndpoints(ctx)
	require.ErrorIs(t, err, secretbox.ErrUnknownKey)
	require.NotContains(t, b.logs.String(), strings.TrimPrefix(first, "whsec_"))
	require.NotContains(t, b.logs.String(), strings.TrimPrefix(second, "whsec_"))
}

// A sealed secret is bound to its endpoint: copied onto another row (by
// someone with write access to the table but not the key) it does not open.
func TestSealedSecretCopiedToAnotherEndpointDoesNotOpen(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	st := b.open(t, key(1))
	ctx := context.Background()
	for _, id := range []string{"ep_a", "ep_b"} {
		_, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: "acct_1", URL: "https://example.com/" + id, Secrets: []string{endpoint.NewSecret()}})
		require.NoError(t, err)
	}
	_, err := b.db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET secrets = (SELECT secrets FROM webhooks.endpoints WHERE id = 'ep_a') WHERE id = 'ep_b'`)
	require.NoError(t, err)
	_, err = st.GetEndpoint(ctx, "ep_b")
	require.ErrorIs(t, err, secretbox.ErrDecrypt)
	var ke *store.SecretKeyError
	require.ErrorAs(t, err, &ke)
	require.Equal(t, "ep_b", ke.Endpoint)
}

func TestRotateSecretKeys(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	ctx := context.Background()
	plainStore := b.open(t)
	secrets := map[string]string{}
	for i := range 7 {
		id := fmt.Sprintf("ep_%d", i)
		secrets[id] = endpoint.NewSecret()
		_, err := plainStore.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: "acct_1", URL: "https://example.com/" + id, Secrets: []string{secrets[id]}})
		require.NoError(t, err)
	}
	require.Equal(t, []string{secrets["ep_0"]}, b.stored(t, "ep_0"), "no key: plain text, as before")
	var updatedBefore time.Time
	require.NoError(t, b.db.Store.Pool().QueryRow(ctx, `SELECT updated_at FROM webhooks.endpoints WHERE id = 'ep_0'`).Scan(&updatedBefore))

	// A key is given: the plain rows still read, and count as plain.
	k1 := b.open(t, key(1))
	at, err := k1.CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, store.SecretsAtRest{Plain: 7, ByKey: map[string]int{}}, at)
	got, err := k1.GetEndpoint(ctx, "ep_3")
	require.NoError(t, err)
	require.Equal(t, []string{secrets["ep_3"]}, got.Secrets)

	var batches []store.RotateSecretsResult
	res, err := k1.RotateSecretKeys(ctx, store.RotateSecretsParams{BatchSize: 3, OnBatch: func(r store.RotateSecretsResult) { batches = append(batches, r) }})
	require.NoError(t, err)
	require.Equal(t, store.RotateSecretsResult{Endpoints: 7, Encrypted: 7}, res)
	require.Len(t, batches, 3, "7 endpoints in batches of 3")
	for id, sec := range secrets {
		requireSealed(t, b.stored(t, id), secretbox.KeyID(key(1)), sec)
	}
	var updatedAfter time.Time
	require.NoError(t, b.db.Store.Pool().QueryRow(ctx, `SELECT updated_at FROM webhooks.endpoints WHERE id = 'ep_0'`).Scan(&updatedAfter))
	require.True(t, updatedBefore.Equal(updatedAfter), "re-encryption is not an edit: updated_at stays")

	// Idempotent.
	res, err = k1.RotateSecretKeys(ctx, store.RotateSecretsParams{})
	require.NoError(t, err)
	require.Equal(t, store.RotateSecretsResult{Endpoints: 7, Current: 7}, res)

	// No key, or only another one: refused at start-up, naming the key id.
	_, err = b.open(t).CheckSecretKeys(ctx)
	require.ErrorIs(t, err, store.ErrSecretsKey)
	require.Contains(t, err.Error(), secretbox.KeyID(key(1))+" (7)")
	_, err = b.open(t, key(2)).CheckSecretKeys(ctx)
	require.ErrorIs(t, err, store.ErrSecretsKey)
	// The right id with the wrong key (an explicit id, a typo in the key).
	wrongUnderID, err := secretbox.ParseKeys(secretbox.KeyID(key(1)) + ":" + base64.StdEncoding.EncodeToString(key(9)))
	require.NoError(t, err)
	wrong, err := store.Open(ctx, store.Config{DatabaseURL: b.db.URL, Secrets: wrongUnderID}, nil)
	require.NoError(t, err)
	defer wrong.Close()
	_, err = wrong.CheckSecretKeys(ctx)
	require.ErrorIs(t, err, store.ErrSecretsKey)
	require.ErrorIs(t, err, secretbox.ErrDecrypt)

	// A new key, current, with the old one still given: new writes and the
	// rotation use the new one; then the old one is no longer needed.
	k21 := b.open(t, key(2), key(1))
	_, err = k21.ModifyEndpoint(ctx, "ep_0", func(e *endpoint.Endpoint) error { e.Description = "edited"; return nil })
	require.NoError(t, err)
	requireSealed(t, b.stored(t, "ep_0"), secretbox.KeyID(key(2)), secrets["ep_0"])
	res, err = k21.RotateSecretKeys(ctx, store.RotateSecretsParams{BatchSize: 4})
	require.NoError(t, err)
	require.Equal(t, store.RotateSecretsResult{Endpoints: 7, Reencrypted: 6, Current: 1}, res)
	k2 := b.open(t, key(2))
	at, err = k2.CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{secretbox.KeyID(key(2)): 7}, at.ByKey)
	eps, err := k2.AllEndpoints(ctx)
	require.NoError(t, err)
	for _, e := range eps {
		require.Equal(t, []string{secrets[e.ID]}, e.Secrets, e.ID)
	}

	// Rotating with a ring that cannot open a row stops there, naming it.
	_, err = b.open(t, key(3)).RotateSecretKeys(ctx, store.RotateSecretsParams{})
	require.ErrorIs(t, err, secretbox.ErrUnknownKey)
	require.Contains(t, err.Error(), "ep_0")
	_, err = b.open(t).RotateSecretKeys(ctx, store.RotateSecretsParams{})
	require.Error(t, err)
	require.NotContains(t, b.logs.String(), "whsec_")
}

// Rotation runs online: API edits of the same endpoints go on meanwhile,
// and none of them is lost or left in plain text.
func TestRotateSecretKeysAlongsideEdits(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	ctx := context.Background()
	plainStore := b.open(t)
	const n = 40
	for i := range n {
		id := fmt.Sprintf("ep_%02d", i)
		_, err := plainStore.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: "acct_1", URL: "https://example.com/" + id, Secrets: []string{endpoint.NewSecret()}})
		require.NoError(t, err)
	}
	k1 := b.open(t, key(1))
	want := map[string]string{}
	var wantMu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			id := fmt.Sprintf("ep_%02d", i)
			sec := endpoint.NewSecret()
			if _, err := k1.ModifyEndpoint(ctx, id, func(e *endpoint.Endpoint) error { e.Secrets = []string{sec}; return nil }); err != nil {
				t.Error(err)
				return
			}
			wantMu.Lock()
			want[id] = sec
			wantMu.Unlock()
		}
	})
	_, err := k1.RotateSecretKeys(ctx, store.RotateSecretsParams{BatchSize: 3})
	wg.Wait()
	require.NoError(t, err)
	eps, err := k1.AllEndpoints(ctx)
	require.NoError(t, err)
	require.Len(t, eps, n)
	for _, e := range eps {
		require.Equal(t, []string{want[e.ID]}, e.Secrets, e.ID)
		requireSealed(t, b.stored(t, e.ID), secretbox.KeyID(key(1)), want[e.ID])
	}
}

// An ed25519 private key (whsk_) is a signing key like a whsec_ secret:
// sealed at rest under the current key, read back plain, and rotated in
// next to a shared secret.
func TestPrivateKeysAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	st := b.open(t, key(1))
	ctx := context.Background()
	private, err := endpoint.NewSigningKey(endpoint.SchemeEd25519)
	require.NoError(t, err)
	secret := endpoint.NewSecret()

	_, err = st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_k", Account: "acct_1", URL: "https://example.com/k", Secrets: []string{secret}})
	require.NoError(t, err)
	rotated, err := st.ModifyEndpoint(ctx, "ep_k", func(e *endpoint.Endpoint) error {
		e.Secrets = []string{private, e.Secrets[0]}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{private, secret}, rotated.Secrets)
	requireSealed(t, b.stored(t, "ep_k"), secretbox.KeyID(key(1)), private, secret)
	for _, v := range b.stored(t, "ep_k") {
		require.NotContains(t, v, strings.TrimPrefix(private, "whsk_"))
	}
	got, err := st.EndpointsByID(ctx, []string{"ep_k"})
	require.NoError(t, err)
	require.Equal(t, []string{private, secret}, got[0].Secrets)
	require.Len(t, got[0].PublicKeys(), 1)
}

// A client certificate's key is sealed at rest, bound to its endpoint and
// to its column; the certificate and its expiry are stored as they are.
func TestClientKeysAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	st := b.open(t, key(1))
	ctx := context.Background()
	ca := tlstest.NewCA(t)
	c := ca.Client(t, "hookd")
	certPEM, err := os.ReadFile(c.CertFile)
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(c.KeyFile)
	require.NoError(t, err)

	created, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_c", Account: "acct_1", URL: "https://example.com/c",
		Secrets: []string{endpoint.NewSecret()}, ClientCert: string(certPEM), ClientKey: string(keyPEM)})
	require.NoError(t, err)
	require.Equal(t, string(keyPEM), created.ClientKey)
	var rawKey, rawCert string
	var notAfter time.Time
	require.NoError(t, b.db.Store.Pool().QueryRow(ctx, `SELECT client_cert, client_key, client_cert_not_after FROM webhooks.endpoints WHERE id = 'ep_c'`).
		Scan(&rawCert, &rawKey, &notAfter))
	require.Equal(t, string(certPEM), rawCert)
	id, ok := secretbox.SealedKeyID(rawKey)
	require.True(t, ok, "the key is stored in plain text")
	require.Equal(t, secretbox.KeyID(key(1)), id)
	require.NotContains(t, rawKey, "PRIVATE KEY")
	info, _ := created.ClientCertInfo()
	require.WithinDuration(t, info.NotAfter, notAfter, time.Second)

	got, err := st.AllEndpoints(ctx)
	require.NoError(t, err)
	require.Equal(t, string(keyPEM), got[0].ClientKey, "the index reads the key plain")

	// Copied into the secrets column, a sealed key does not open.
	_, err = b.db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
		SELECT 'ep_copy', account, url, ARRAY[client_key] FROM webhooks.endpoints WHERE id = 'ep_c'`)
	require.NoError(t, err)
	_, err = st.GetEndpoint(ctx, "ep_copy")
	require.ErrorIs(t, err, secretbox.ErrDecrypt)

	cleared, err := st.ModifyEndpoint(ctx, "ep_c", func(e *endpoint.Endpoint) error {
		e.ClientCert, e.ClientKey = "", ""
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, cleared.ClientCert)
	var isNull bool
	require.NoError(t, b.db.Store.Pool().QueryRow(ctx, `SELECT client_key IS NULL AND client_cert_not_after IS NULL FROM webhooks.endpoints WHERE id = 'ep_c'`).Scan(&isNull))
	require.True(t, isNull)
}

// rotate-key and the start-up check cover client certificate keys too.
func TestRotateSecretKeysSealsClientKeys(t *testing.T) {
	t.Parallel()
	b := newSecretsBundle(t)
	ctx := context.Background()
	c := tlstest.NewCA(t).Client(t, "hookd")
	certPEM, err := os.ReadFile(c.CertFile)
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(c.KeyFile)
	require.NoError(t, err)
	_, err = b.open(t).CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_c", Account: "acct_1", URL: "https://example.com/c",
		Secrets: []string{endpoint.NewSecret()}, ClientCert: string(certPEM), ClientKey: string(keyPEM)})
	require.NoError(t, err)
	rawKey := func() string {
		var v string
		require.NoError(t, b.db.Store.Pool().QueryRow(ctx, `SELECT client_key FROM webhooks.endpoints WHERE id = 'ep_c'`).Scan(&v))
		return v
	}
	require.Equal(t, string(keyPEM), rawKey(), "no key: plain text")

	k1 := b.open(t, key(1))
	at, err := k1.CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, at.Plain, "the secret and the client key")
	res, err := k1.RotateSecretKeys(ctx, store.RotateSecretsParams{})
	require.NoError(t, err)
	require.Equal(t, store.RotateSecretsResult{Endpoints: 1, Encrypted: 1}, res)
	id, ok := secretbox.SealedKeyID(rawKey())
	require.True(t, ok)
	require.Equal(t, secretbox.KeyID(key(1)), id)

	k21 := b.open(t, key(2), key(1))
	res, err = k21.RotateSecretKeys(ctx, store.RotateSecretsParams{})
	require.NoError(t, err)
	require.Equal(t, store.RotateSecretsResult{Endpoints: 1, Reencrypted: 1}, res)
	id, _ = secretbox.SealedKeyID(rawKey())
	require.Equal(t, secretbox.KeyID(key(2)), id)
	at, err = b.open(t, key(2)).CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{secretbox.KeyID(key(2)): 2}, at.ByKey)
	got, err := b.open(t, key(2)).GetEndpoint(ctx, "ep_c")
	require.NoError(t, err)
	require.Equal(t, string(keyPEM), got.ClientKey)

	// The client key alone under a key given with the wrong bytes: refused
	// at start-up.
	_, err = b.db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET secrets = $1 WHERE id = 'ep_c'`, []string{endpoint.NewSecret()})
	require.NoError(t, err)
	wrongUnderID, err := secretbox.ParseKeys(secretbox.KeyID(key(2)) + ":" + base64.StdEncoding.EncodeToString(key(9)))
	require.NoError(t, err)
	wrong, err := store.Open(ctx, store.Config{DatabaseURL: b.db.URL, Secrets: wrongUnderID}, nil)
	require.NoError(t, err)
	defer wrong.Close()
	_, err = wrong.CheckSecretKeys(ctx)
	require.ErrorIs(t, err, store.ErrSecretsKey)
	require.ErrorIs(t, err, secretbox.ErrDecrypt)
	require.Contains(t, err.Error(), "client key")
}

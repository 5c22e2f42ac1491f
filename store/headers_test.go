package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
)

// Custom headers survive create, read, list, the index's loads and an
// update; clearing them stores '{}', and the store refuses reserved names
// whichever path writes.
func TestEndpointHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	want := map[string]string{"X-Tenant": "acme", "Authorization": "Bearer ünï \"quoted\""}

	out, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_h", Account: "acct", URL: "https://example.com/h",
		Secrets: []string{endpoint.NewSecret()}, Headers: want})
	require.NoError(t, err)
	require.Equal(t, want, out.Headers)
	got, err := st.GetEndpoint(ctx, "ep_h")
	require.NoError(t, err)
	require.Equal(t, want, got.Headers)
	all, err := st.EndpointsByID(ctx, []string{"ep_h"})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, want, all[0].Headers, "the index reads them")

	out, err = st.ModifyEndpoint(ctx, "ep_h", func(e *endpoint.Endpoint) error {
		e.Headers = map[string]string{"X-Other": "1"}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Other": "1"}, out.Headers)

	out, err = st.ModifyEndpoint(ctx, "ep_h", func(e *endpoint.Endpoint) error { e.Headers = nil; return nil })
	require.NoError(t, err)
	require.Nil(t, out.Headers)
	var raw string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT headers::text FROM webhooks.endpoints WHERE id = 'ep_h'`).Scan(&raw))
	require.Equal(t, "{}", raw)

	_, err = st.ModifyEndpoint(ctx, "ep_h", func(e *endpoint.Endpoint) error {
		e.Headers = map[string]string{"webhook-signature": "v1,forged"}
		return nil
	})
	require.ErrorIs(t, err, endpoint.ErrInvalid)
	require.Contains(t, err.Error(), "webhook-signature")

	// A row written before migration 16 (no headers given) reads as none.
	_, err = st.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets) VALUES ('ep_old', 'acct', 'https://example.com/', $1)`,
		[]string{endpoint.NewSecret()})
	require.NoError(t, err)
	old, err := st.GetEndpoint(ctx, "ep_old")
	require.NoError(t, err)
	require.Nil(t, old.Headers)
}

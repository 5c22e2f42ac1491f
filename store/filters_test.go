package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
)

// A payload filter survives create, read, the index's reads and an update;
// {} is stored as none (NULL), and the store refuses a bad filter whichever
// path writes.
func TestEndpointFilterRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	f := `{"type": {"$prefix": "invoice."}, "data": {"amount": {"$gte": 100}}}`

	out, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_f", Account: "acct", URL: "https://example.com/f",
		Secrets: []string{endpoint.NewSecret()}, Filter: []byte(f)})
	require.NoError(t, err)
	require.JSONEq(t, f, string(out.Filter))
	all, err := st.EndpointsByID(ctx, []string{"ep_f"})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.JSONEq(t, f, string(all[0].Filter), "the index reads it")
	require.NoError(t, all[0].CompileFilter())
	require.True(t, all[0].HasFilter())

	out, err = st.ModifyEndpoint(ctx, "ep_f", func(e *endpoint.Endpoint) error { e.Filter = []byte(`{}`); return nil })
	require.NoError(t, err)
	require.Nil(t, out.Filter)
	var isNull bool
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT filter IS NULL FROM webhooks.endpoints WHERE id = 'ep_f'`).Scan(&isNull))
	require.True(t, isNull)

	_, err = st.ModifyEndpoint(ctx, "ep_f", func(e *endpoint.Endpoint) error {
		e.Filter = []byte(`{"data": {"amount": {"$regex": "1"}}}`)
		return nil
	})
	require.ErrorIs(t, err, endpoint.ErrInvalid)
	require.Contains(t, err.Error(), "filter.data.amount.$regex: unknown operator")
}

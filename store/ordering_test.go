package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
)

// An endpoint's ordering survives create, the index's reads and an
// update; the default reads back as "" (none) and is stored as 'none'; the
// store refuses an unknown ordering whichever path writes.
func TestEndpointOrderingRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	mk := func(id string, o endpoint.Ordering) endpoint.Endpoint {
		return endpoint.Endpoint{ID: id, Account: "acct", URL: "https://example.com/" + id,
			Secrets: []string{endpoint.NewSecret()}, Ordering: o}
	}
	out, err := st.CreateEndpoint(ctx, mk("ep_fifo", endpoint.OrderingFIFO))
	require.NoError(t, err)
	require.True(t, out.FIFO())
	out, err = st.CreateEndpoint(ctx, mk("ep_none", ""))
	require.NoError(t, err)
	require.Equal(t, endpoint.Ordering(""), out.Ordering)
	var stored string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT ordering FROM webhooks.endpoints WHERE id = 'ep_none'`).Scan(&stored))
	require.Equal(t, "none", stored)

	all, err := st.EndpointsByID(ctx, []string{"ep_fifo"})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.True(t, all[0].FIFO(), "the index reads it")

	out, err = st.ModifyEndpoint(ctx, "ep_fifo", func(e *endpoint.Endpoint) error { e.Ordering = endpoint.OrderingNone; return nil })
	require.NoError(t, err)
	require.False(t, out.FIFO())

	_, err = st.ModifyEndpoint(ctx, "ep_fifo", func(e *endpoint.Endpoint) error { e.Ordering = "lifo"; return nil })
	require.ErrorIs(t, err, endpoint.ErrInvalid)
	require.Contains(t, err.Error(), `ordering: must be "none" or "fifo", got "lifo"`)
}

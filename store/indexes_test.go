package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// The status indexes leave delivered rows out (migration 13: two index
// entries fewer per delivered webhook); a listing filtered on any other
// state still reads them, through both front doors (the API's
// ListDeliveries and the portal's DeliveryLog), by endpoint and by account.
func TestStatusListingsReadTheOpenStatusIndexes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, db.Store, "ep_1", "acct_a"))
	for i, status := range []string{"delivered", "delivered", "dead", "retrying", "pending"} {
		deliveryRowOf(t, db, "dlv_"+string(rune('a'+i)), "evt_1", "ep_1", "acct_a", status)
	}
	var partial []string
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT array_agg(indexrelname::text ORDER BY indexrelname)
		FROM pg_stat_user_indexes WHERE relname = 'deliveries' AND indexrelname LIKE '%open_status%'`).Scan(&partial))
	require.Equal(t, []string{"deliveries_account_open_status_idx", "deliveries_endpoint_open_status_idx"}, partial)
	var def string
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT pg_get_indexdef('webhooks.deliveries_account_open_status_idx'::regclass)`).Scan(&def))
	require.Contains(t, def, "WHERE (status <> 'delivered'::text)")

	// A tiny table is read whole unless sequential scans are ruled out;
	// what is asserted is that the planner may use the partial indexes, in
	// the generic plan of a prepared statement too (which knows no status
	// value, only what the query's text says).
	for _, set := range []string{"enable_seqscan = off", "plan_cache_mode = force_generic_plan"} {
		_, err := db.Store.Pool().Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET "+set)
		require.NoError(t, err)
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: db.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	ds, err := st.ListDeliveries(ctx, store.ListDeliveriesParams{EndpointID: "ep_1", Status: "dead"})
	require.NoError(t, err)
	require.Equal(t, []string{"dlv_c"}, deliveryIDs(ds))
	ds, _, err = st.DeliveryLog(ctx, store.DeliveryLogParams{Account: "acct_a", Status: "retrying"})
	require.NoError(t, err)
	require.Equal(t, []string{"dlv_d"}, deliveryIDs(ds))
	ds, _, err = st.DeliveryLog(ctx, store.DeliveryLogParams{Account: "acct_a", Status: "delivered"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"dlv_a", "dlv_b"}, deliveryIDs(ds))
	st.Close() // a session's statistics are flushed when it ends

	scans := func() (byEndpoint, byAccount int64) {
		require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT
			sum(idx_scan) FILTER (WHERE indexrelname = 'deliveries_endpoint_open_status_idx'),
			sum(idx_scan) FILTER (WHERE indexrelname = 'deliveries_account_open_status_idx')
			FROM pg_stat_user_indexes WHERE relname = 'deliveries'`).Scan(&byEndpoint, &byAccount))
		return byEndpoint, byAccount
	}
	wait.For(t, 10*time.Second, "both open-status indexes scanned", func() bool {
		e, a := scans()
		return e > 0 && a > 0
	})
}

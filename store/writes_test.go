package store_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// tableWrites is what pg_stat_user_tables says was written to one table.
type tableWrites struct{ Inserted, Updated int64 }

// countWrites runs write on a store of its own and returns the rows it
// wrote to webhooks.deliveries and to the attempt log, read from the
// statistics once that store's sessions have ended (a session flushes its
// statistics before it leaves pg_stat_activity). db.Store is reopened.
func countWrites(t *testing.T, db *pgtest.DB, write func(st *store.Store)) (deliveries, attempts tableWrites) {
	t.Helper()
	ctx := context.Background()
	db.Store.Close()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	read := func() (d, a tableWrites) {
		wait.For(t, 30*time.Second, "the other sessions to end", func() bool {
			var n int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n))
			return n == 0
		})
		require.NoError(t, conn.QueryRow(ctx, `SELECT
				(SELECT n_tup_ins FROM pg_stat_user_tables WHERE schemaname = 'webhooks' AND relname = 'deliveries'),
				(SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'webhooks' AND relname = 'deliveries'),
				(SELECT COALESCE(sum(n_tup_ins), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'webhooks' AND relname LIKE 'attempts%'),
				(SELECT COALESCE(sum(n_tup_upd), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'webhooks' AND relname LIKE 'attempts%')`).
			Scan(&d.Inserted, &d.Updated, &a.Inserted, &a.Updated))
		return d, a
	}
	d0, a0 := read()
	st, err := store.Open(ctx, store.Config{DatabaseURL: db.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	write(st)
	st.Close()
	d1, a1 := read()
	// The test reads on through db.Store.
	db.Store, err = store.Open(ctx, store.Config{DatabaseURL: db.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(db.Store.Close)
	return tableWrites{d1.Inserted - d0.Inserted, d1.Updated - d0.Updated},
		tableWrites{a1.Inserted - a0.Inserted, a1.Updated - a0.Updated}
}

func pendingOf(r *attempt.Record) store.PendingDelivery {
	return store.PendingDelivery{ID: r.DeliveryID, EventID: r.EventID, EndpointID: r.EndpointID, Account: r.Account,
		EventType: r.EventType, EventCreated: r.EventCreated}
}

// Issue 15: a delivery whose pending record and first attempt are written
// in one batch costs one deliveries row, inserted in its final state, and
// one attempt row: no pending row updated right after it was inserted.
func TestWriteAttemptsInsertsADeliveryOnceWithItsPendingRecord(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	const n = 20
	var recs []*attempt.Record
	var pending []store.PendingDelivery
	for i := range n {
		r := rec(fmt.Sprintf("dlv_%02d", i), "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
		recs, pending = append(recs, r), append(pending, pendingOf(r))
	}
	dw, aw := countWrites(t, db, func(st *store.Store) {
		_, err := st.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: recs, Pending: pending,
			Now: t0, DisableAfter: 72 * time.Hour})
		require.NoError(t, err)
	})
	require.Equal(t, tableWrites{Inserted: n}, dw, "deliveries: one insert each, no update")
	require.Equal(t, tableWrites{Inserted: n}, aw)
	for i := range n {
		d := getDelivery(t, db, fmt.Sprintf("dlv_%02d", i))
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
	}
}

// Issue 15: an attempt of a delivery whose pending row was written in an
// earlier batch moves that row with one update, not two (attempt count, then
// state).
func TestWriteAttemptsUpdatesAPendingRowOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	const n = 20
	var recs []*attempt.Record
	var pending []store.PendingDelivery
	for i := range n {
		r := rec(fmt.Sprintf("dlv_%02d", i), "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
		recs, pending = append(recs, r), append(pending, pendingOf(r))
	}
	require.NoError(t, db.Store.InsertPendingDeliveries(context.Background(), pending))
	dw, _ := countWrites(t, db, func(st *store.Store) {
		_, err := st.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: recs, Now: t0, DisableAfter: 72 * time.Hour})
		require.NoError(t, err)
	})
	require.Equal(t, tableWrites{Updated: n}, dw, "deliveries: one update each")
	for i := range n {
		d := getDelivery(t, db, fmt.Sprintf("dlv_%02d", i))
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
	}
}

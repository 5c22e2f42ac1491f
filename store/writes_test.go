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
	require.Equal(t, tableWrites{}, aw, "the delivery rows hold the attempts")
	requireLogged(t, db, recs)
}

// requireLogged asserts that the delivery log answers for recs, all of them
// first attempts answered 200, what it answered when each had a row of its
// own.
func requireLogged(t *testing.T, db *pgtest.DB, recs []*attempt.Record) {
	t.Helper()
	for _, r := range recs {
		d := getDelivery(t, db, r.DeliveryID)
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
		as, err := db.Store.AttemptsOfDelivery(context.Background(), "acct_1", r.DeliveryID, 0)
		require.NoError(t, err)
		require.Len(t, as, 1)
		require.Equal(t, r.AttemptID, as[0].AttemptID)
		require.Equal(t, 200, as[0].StatusCode)
		require.Equal(t, string(r.Outcome), as[0].Outcome)
		require.True(t, r.StartedAt.Equal(as[0].StartedAt))
		require.Equal(t, r.Tier, as[0].Tier)
	}
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.attempts`).Scan(&n))
	require.Equal(t, len(recs), n)
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
	dw, aw := countWrites(t, db, func(st *store.Store) {
		_, err := st.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: recs, Now: t0, DisableAfter: 72 * time.Hour})
		require.NoError(t, err)
	})
	require.Equal(t, tableWrites{Updated: n}, dw, "deliveries: one update each")
	require.Equal(t, tableWrites{}, aw, "the delivery rows hold the attempts")
	requireLogged(t, db, recs)
}

// Issue 15: a delivery row holds its first attempt only; the later ones
// (retries, a replay) have rows of their own, and records read again change
// nothing, whichever holds them.
func TestWriteAttemptsHoldsTheFirstAttemptOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	a1 := rec("dlv_r", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	a2 := rec("dlv_r", "ep1", 2, attempt.OutcomeRetry, attempt.NextRetry)
	a3 := rec("dlv_r", "ep1", 3, attempt.OutcomeDelivered, attempt.NextDone)
	res := write(t, db, t0, a1, a2)
	require.Len(t, res.Inserted, 2)
	res = write(t, db, t0, a3, a1)
	require.Equal(t, map[string]bool{a3.AttemptID: true}, res.Inserted, "a1 read again is not new")
	var held string
	var rows int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT a_id,
		(SELECT count(*) FROM webhooks.attempt_rows WHERE delivery_id = 'dlv_r') FROM webhooks.deliveries WHERE id = 'dlv_r'`).Scan(&held, &rows))
	require.Equal(t, a1.AttemptID, held)
	require.Equal(t, 2, rows)
	as, err := db.Store.AttemptsOfDelivery(context.Background(), "acct_1", "dlv_r", 0)
	require.NoError(t, err)
	require.Equal(t, []string{a1.AttemptID, a2.AttemptID, a3.AttemptID}, []string{as[0].AttemptID, as[1].AttemptID, as[2].AttemptID})
	d := getDelivery(t, db, "dlv_r")
	require.Equal(t, "delivered", d.Status)
	require.Equal(t, 3, d.Attempts)

	res = write(t, db, t0, a1, a2, a3)
	require.Empty(t, res.Inserted, "nothing is new")
	require.Equal(t, 3, countAttempts(t, db, "dlv_r"))
}

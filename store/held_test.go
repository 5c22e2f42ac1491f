package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// ClearExpiredHeldAttempts erases, batch by batch, the attempts held by
// delivery rows that started before the horizon, of every endpoint; leaves
// the newer ones and rows a writer has locked; and does nothing before the
// first day is dropped.
func TestClearExpiredHeldAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	old := t0.AddDate(0, 0, -40)
	_, err := db.Store.MaintainAttemptPartitions(ctx, old, 45, 60*24*time.Hour)
	require.NoError(t, err)
	var recs []*attempt.Record
	for i := range 11 {
		r := rec(fmt.Sprintf("d_old%02d", i), fmt.Sprintf("ep%d", i%3), 1, attempt.OutcomeDelivered, attempt.NextDone)
		r.StartedAt, r.ResponseExcerpt = old.Add(time.Duration(i)*time.Minute), "secret"
		recs = append(recs, r)
		n := rec(fmt.Sprintf("d_new%02d", i), fmt.Sprintf("ep%d", i%3), 1, attempt.OutcomeDelivered, attempt.NextDone)
		recs = append(recs, n)
	}
	_, err = db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Now: t0, Records: recs})
	require.NoError(t, err)

	n, err := db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{Batch: 2})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is due before a day is dropped")

	_, err = db.Store.MaintainAttemptPartitions(ctx, t0, 3, 30*24*time.Hour)
	require.NoError(t, err)
	// A writer holds the lock of one due row: it is left for the next pass.
	tx, err := db.Store.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM webhooks.deliveries WHERE id = 'd_old04' FOR UPDATE`)
	require.NoError(t, err)
	n, err = db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{Batch: 2})
	require.NoError(t, err)
	require.Equal(t, int64(10), n)
	require.Equal(t, []string{"d_old04"}, held(t, db, "d_old%"))
	require.NoError(t, tx.Rollback(ctx))

	n, err = db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Empty(t, held(t, db, "d_old%"))
	require.Len(t, held(t, db, "d_new%"), 11)
	n, err = db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{})
	require.NoError(t, err)
	require.Zero(t, n, "a second pass finds nothing")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = db.Store.ClearExpiredHeldAttempts(cctx, store.ClearHeldParams{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{Batch: -1})
	require.ErrorContains(t, err, "batch")
}

// held lists the delivery rows matching like that hold an attempt.
func held(t *testing.T, db *pgtest.DB, like string) []string {
	t.Helper()
	rows, err := db.Store.Pool().Query(context.Background(),
		`SELECT id FROM webhooks.deliveries WHERE a_id IS NOT NULL AND id LIKE $1 ORDER BY id`, like)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := pgtest.NewUnmigrated(t)
	ctx := context.Background()

	want, err := store.SchemaVersion()
	require.NoError(t, err)
	require.GreaterOrEqual(t, want, int64(1))

	first, err := db.Store.Migrate(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, first.Applied)
	require.Equal(t, want, first.Version)

	second, err := db.Store.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, second.Applied, "second migrate must be a no-op")
	require.Equal(t, want, second.Version)

	// The tables of the product contract exist.
	for _, table := range []string{"endpoints", "outbox", "deliveries", "attempts", "replays"} {
		var n int
		err := db.Store.Pool().QueryRow(ctx,
			`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'webhooks' AND table_name = $1`, table).Scan(&n)
		require.NoError(t, err)
		require.Equal(t, 1, n, "table webhooks.%s", table)
	}
}

func TestOutboxAcceptsPlainSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Store.Pool().Exec(ctx,
		`INSERT INTO webhooks.outbox (account, type, payload) VALUES ('acct_1', 'invoice.paid', '{"invoice":"in_1"}')`)
	require.NoError(t, err)
	var id string
	var created time.Time
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT id, created_at FROM webhooks.outbox`).Scan(&id, &created))
	require.Len(t, id, 36, "id defaults to a UUID")
	require.WithinDuration(t, time.Now(), created, time.Minute)
}

func TestMaintainAttemptPartitions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)

	res, err := db.Store.MaintainAttemptPartitions(ctx, now, 2, 30*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"attempts_p20260310", "attempts_p20260311", "attempts_p20260312"}, res.Ensured)
	require.Empty(t, res.Dropped)

	// An attempt of today lands in today's partition, not the default one.
	_, err = db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.attempts
		(attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at, duration_ms, outcome, next_action)
		VALUES ('a1', 'd1', 'e1', 'ep1', 1, 'deliveries', $1, 5, 'delivered', 'done')`, now)
	require.NoError(t, err)
	var part string
	require.NoError(t, db.Store.Pool().QueryRow(ctx,
		`SELECT tableoid::regclass::text FROM webhooks.attempt_rows WHERE attempt_id = 'a1'`).Scan(&part))
	require.Equal(t, "webhooks.attempts_p20260310", part)

	// A delivery row holding its first attempt, made the same day.
	_, err = db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Now: now,
		Records: []*attempt.Record{rec("d_held", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)}})
	require.NoError(t, err)
	require.Equal(t, 2, countAll(t, db))

	// 40 days later with a 30-day retention, the March partitions are gone
	// and the new days exist; the attempt the delivery row holds is gone
	// from the log with its day.
	later := now.AddDate(0, 0, 40)
	res, err = db.Store.MaintainAttemptPartitions(ctx, later, 1, 30*24*time.Hour)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"attempts_p20260310", "attempts_p20260311", "attempts_p20260312"}, res.Dropped)
	names, err := db.Store.AttemptPartitions(ctx)
	require.NoError(t, err)
	require.True(t, slices.Contains(names, "attempts_default"))
	require.True(t, slices.Contains(names, "attempts_p20260419"))
	require.False(t, slices.Contains(names, "attempts_p20260310"))
	require.Zero(t, countAll(t, db))
	require.Equal(t, "delivered", getDelivery(t, db, "d_held").Status, "the delivery row stays")

	_, err = db.Store.MaintainAttemptPartitions(ctx, later, 1, time.Hour)
	require.ErrorContains(t, err, "attempt retention")
}

func countAll(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.attempts`).Scan(&n))
	return n
}

package store_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// Upgrading to version 18 backfills the hourly rollup from the attempt log
// already there (attempts of their own rows, one logged with no account,
// and those held by delivery rows) as RebuildAttemptHours computes it.
func TestMigration18BackfillsAttemptHours(t *testing.T) {
	t.Parallel()
	db := pgtest.NewUnmigrated(t)
	ctx := context.Background()
	pool := db.Store.Pool()
	_, err := pool.Exec(ctx, "CREATE SCHEMA webhooks")
	require.NoError(t, err)
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS("migrations"),
		goose.WithTableName("webhooks.goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 16)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, status, event_created_at,
			a_id, a_attempt, a_tier, a_started_at, a_duration_ms, a_outcome, a_next_action)
		SELECT 'd' || g, 'e' || g, 'ep1', 'acct_a', 't', 'delivered', now(), 'a' || g, 1, 'deliveries',
			date_trunc('hour', now()) - make_interval(mins => g * 7), 10 + g * 13 % 500, 'delivered', 'done'
		FROM generate_series(1, 300) g;
		INSERT INTO webhooks.attempts (attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at,
			duration_ms, status_code, outcome, next_action, account)
		SELECT 'r' || g, 'd' || g, 'e' || g, 'ep1', 2, 'retry-1', date_trunc('hour', now()) - make_interval(mins => g * 11),
			5 + g % 40, 503, 'retry', 'retry', CASE WHEN g % 10 = 0 THEN NULL ELSE 'acct_a' END
		FROM generate_series(1, 100) g;
		INSERT INTO webhooks.attempts (attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at,
			duration_ms, outcome, next_action, account)
		VALUES ('c1', 'd1', 'e1', 'ep1', 3, 'retry-2', now(), 0, 'circuit_open', 'retry', 'acct_a')`)
	require.NoError(t, err)

	_, err = db.Store.Migrate(ctx)
	require.NoError(t, err)
	read := func() (string, int64, int64) {
		var rows string
		var delivered, failed int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(format('%s %s %s %s %s %s', account, endpoint_id, hour, delivered, failed, latency), ';' ORDER BY account, hour),
			sum(delivered), sum(failed) FROM webhooks.attempt_hours`).Scan(&rows, &delivered, &failed))
		return rows, delivered, failed
	}
	backfilled, delivered, failed := read()
	require.EqualValues(t, 300, delivered)
	require.EqualValues(t, 100, failed, "the circuit-open attempt made no request")
	require.NoError(t, db.Store.RebuildAttemptHours(ctx))
	rebuilt, _, _ := read()
	require.Equal(t, rebuilt, backfilled)
	var noAccount int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(failed) FROM webhooks.attempt_hours WHERE account = ''`).Scan(&noAccount))
	require.EqualValues(t, 10, noAccount, "attempts logged without an account are kept under ''")
}

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

// Upgrading to version 5 gives a tombstone to the live endpoints' ids and
// to the ids of endpoints deleted before, if they ever had a delivery: an
// id with records possibly still in Kafka is never reused.
func TestMigration5KeepsOldEndpointIDs(t *testing.T) {
	t.Parallel()
	db := pgtest.NewUnmigrated(t)
	ctx := context.Background()
	pool := db.Store.Pool()
	_, err := pool.Exec(ctx, "CREATE SCHEMA webhooks")
	require.NoError(t, err)
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	// The same files and version table as store.Migrate, stopped at 4.
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS("migrations"),
		goose.WithTableName("webhooks.goose_db_version"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 4)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO webhooks.endpoints (id, account, url, secrets) VALUES ('ep_live', 'acct_a', 'https://a.example.com', '{s}');
		INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at, created_at) VALUES
			('d1', 'e1', 'ep_gone', 'acct_x', 't', now(), now() - interval '1 hour'),
			('d2', 'e2', 'ep_gone', 'acct_b', 't', now(), now()),
			('d3', 'e3', 'ep_live', 'acct_a', 't', now(), now())`)
	require.NoError(t, err)

	_, err = db.Store.Migrate(ctx)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT id || '/' || account || '/' || (deleted_at IS NOT NULL)::text
		FROM webhooks.endpoint_ids ORDER BY id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		got = append(got, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"ep_gone/acct_b/true", "ep_live/acct_a/false"}, got, "the newest delivery's account")
	for _, id := range []string{"ep_gone", "ep_live"} {
		_, err = pool.Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
			VALUES ($1, 'acct_c', 'https://c.example.com', '{s}')`, id)
		require.ErrorContains(t, err, "never reused", id)
	}
}

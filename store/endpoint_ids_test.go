package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

func createEndpoint(ctx context.Context, st *store.Store, id, account string) error {
	_, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: account, URL: "https://example.com/" + id,
		Secrets: []string{endpoint.NewSecret()}})
	return err
}

// The repro of issue 11 item 1 starts with account A taking over the id of
// account B's deleted endpoint: that must be impossible, for every account.
func TestEndpointIDsAreNeverReused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()

	// The NOTIFY of every change still fires, delete included.
	listenCtx, stopListening := context.WithCancel(ctx)
	var mu sync.Mutex
	notified := map[string]int{}
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.ListenEndpointChanges(listenCtx, func(context.Context) error { close(listening); return nil },
			func(id string) { mu.Lock(); notified[id]++; mu.Unlock() })
	}()
	<-listening

	require.NoError(t, createEndpoint(ctx, st, "ep_shared", "acct_b"))
	require.NoError(t, st.DeleteEndpoint(ctx, "ep_shared"))

	var account string
	var deletedAt time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT account, deleted_at FROM webhooks.deleted_endpoints WHERE id = 'ep_shared'`).
		Scan(&account, &deletedAt))
	require.Equal(t, "acct_b", account, "the tombstone keeps the account")
	require.WithinDuration(t, time.Now(), deletedAt, time.Minute)

	for _, acct := range []string{"acct_a", "acct_b"} {
		err := createEndpoint(ctx, st, "ep_shared", acct)
		require.ErrorIs(t, err, store.ErrAlreadyExists, "a deleted id is never reused, even by %s", acct)
	}
	_, err := st.GetEndpoint(ctx, "ep_shared")
	require.ErrorIs(t, err, store.ErrNotFound)

	// A live id is taken too, and a plain SQL insert is refused as well.
	require.NoError(t, createEndpoint(ctx, st, "ep_live", "acct_a"))
	require.ErrorIs(t, createEndpoint(ctx, st, "ep_live", "acct_b"), store.ErrAlreadyExists)
	_, err = st.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets) VALUES ('ep_shared', 'acct_a', 'https://x.example.com', '{s}')`)
	require.ErrorContains(t, err, "never reused")

	wait.For(t, 10*time.Second, "NOTIFY of create, delete and create", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return notified["ep_shared"] == 2 && notified["ep_live"] == 1
	})
	stopListening()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A create that waits on a concurrent delete of the same id (the delete's
// transaction still open) must fail once the delete commits: the check
// cannot be passed before the tombstone becomes visible.
func TestEndpointCreateRacingDeleteFails(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			st := db.Store
			ctx := context.Background()
			require.NoError(t, createEndpoint(ctx, st, "ep_race", "acct_b"))

			tx, err := st.Pool().Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			tag, err := tx.Exec(ctx, `DELETE FROM webhooks.endpoints WHERE id = 'ep_race'`)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())

			created := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				created <- pgx.BeginTxFunc(ctx, st.Pool(), pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
						VALUES ('ep_race', 'acct_a', 'https://a.example.com', '{s}')`)
					return err
				})
			}()
			wait.For(t, 10*time.Second, "the create waiting on the delete's lock", func() bool {
				var n int
				require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
					WHERE NOT l.granted AND a.datname = current_database()`).Scan(&n))
				return n > 0
			})
			require.NoError(t, tx.Commit(ctx))
			err = <-created
			require.Error(t, err, "the create must not win the race")
			var n int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM webhooks.endpoints WHERE id = 'ep_race'`).Scan(&n))
			require.Zero(t, n)
		})
	}
}

func TestEndpointConcurrentCreatesOneWins(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	const n = 8
	errs := make(chan error, n)
	var start sync.WaitGroup
	start.Add(1)
	for i := range n {
		go func() {
			start.Wait()
			errs <- createEndpoint(ctx, db.Store, "ep_contested", []string{"acct_a", "acct_b"}[i%2])
		}()
	}
	start.Done()
	won := 0
	for range n {
		err := <-errs
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, store.ErrAlreadyExists)
	}
	require.Equal(t, 1, won)
}

func TestEndpointIdentityIsFixed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, st, "ep_1", "acct_a"))
	require.NoError(t, createEndpoint(ctx, st, "ep_2", "acct_a"))

	_, err := st.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET account = 'acct_b' WHERE id = 'ep_1'`)
	require.ErrorContains(t, err, "cannot change")
	_, err = st.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET id = 'ep_9' WHERE id = 'ep_1'`)
	require.ErrorContains(t, err, "cannot change")
	// Other columns still change (the endpoints NOTIFY and health triggers
	// are untouched).
	_, err = st.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET description = 'x' WHERE id = 'ep_1'`)
	require.NoError(t, err)

	// TRUNCATE skips row triggers; it still leaves tombstones.
	_, err = st.Pool().Exec(ctx, `TRUNCATE webhooks.endpoints`)
	require.NoError(t, err)
	require.ErrorIs(t, createEndpoint(ctx, st, "ep_2", "acct_b"), store.ErrAlreadyExists)
}

package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// TestWriteAttemptsRetriesARowAnotherWriterCreated: WriteAttempts inserts
// the delivery rows it did not find with a plain INSERT. When another
// writer (two writers of one partition during a rebalance) creates one of
// them between the lookup and the insert, the batch fails with an error
// worth retrying, not ErrInvalidData (which would split the batch and skip
// records), and the retry moves the other writer's row on, holding the
// attempt once.
func TestWriteAttemptsRetriesARowAnotherWriterCreated(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")

	other, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer other.Close(ctx)
	otherTx, err := other.Begin(ctx)
	require.NoError(t, err)
	_, err = otherTx.Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at)
		VALUES ('d1', 'evt-d1', 'ep1', 'acct_1', 'invoice.paid', $1)`, t0)
	require.NoError(t, err)

	r := rec("d1", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
	params := store.WriteAttemptsParams{Records: []*attempt.Record{r}, Now: t0, DisableAfter: 72 * time.Hour}
	done := make(chan error, 1)
	go func() {
		_, err := db.Store.WriteAttempts(ctx, params)
		done <- err
	}()
	// The insert waits for the other writer's uncommitted row.
	waitForLockWait(t, db)
	require.NoError(t, otherTx.Commit(ctx))

	err = <-done
	require.Error(t, err, "the insert met the other writer's row")
	require.NotErrorIs(t, err, store.ErrInvalidData, "a race is worth retrying, the records are fine")

	res, err := db.Store.WriteAttempts(ctx, params)
	require.NoError(t, err)
	require.True(t, res.Inserted[r.AttemptID])
	d := getDelivery(t, db, "d1")
	require.Equal(t, "delivered", d.Status)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, 1, countAttempts(t, db, "d1"), "the attempt is logged once")
	var held string
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT a_id FROM webhooks.deliveries WHERE id = 'd1'`).Scan(&held))
	require.Equal(t, r.AttemptID, held, "the other writer's row holds the attempt")
}

// waitForLockWait polls until a session of db waits for a lock.
func waitForLockWait(t *testing.T, db *pgtest.DB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "no session of the database waits for a lock")
		time.Sleep(10 * time.Millisecond) // polling pg_stat_activity
	}
}

// TestWriteAttemptsWaitsForAnotherWritersHealth: a batch whose attempts can
// move an endpoint's failing_since (a failure) waits for another writer
// that is moving the same endpoint's health, and decides on what it
// committed. Here the other writer (its statements done by hand, as
// WriteAttempts does them for a 200: the success recorded, failing_since
// cleared) has not committed yet while this batch writes a failure that
// started just before the endpoint's recorded first failure (a late
// record: within healthResolution of the recorded last failure, so the
// health upsert has nothing to record for it). Deciding on the endpoint as
// it was before the success would set failing_since back to the late
// failure and, the run of failures being older than DisableAfter, disable
// an endpoint that has just answered 200.
func TestWriteAttemptsWaitsForAnotherWritersHealth(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")

	first := rec("d1", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	first.StartedAt = t0.Add(10 * time.Minute)
	write(t, db, t0.Add(11*time.Minute), first)
	ep, err := db.Store.GetEndpoint(ctx, "ep1")
	require.NoError(t, err)
	require.True(t, ep.FailingSince.Equal(first.StartedAt), "failing since %s", ep.FailingSince)

	success := t0.Add(20 * time.Minute)
	other, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer other.Close(ctx)
	otherTx, err := other.Begin(ctx)
	require.NoError(t, err)
	_, err = otherTx.Exec(ctx, `UPDATE webhooks.endpoint_health SET last_success_at = $1 WHERE endpoint_id = 'ep1'`, success)
	require.NoError(t, err)
	_, err = otherTx.Exec(ctx, `UPDATE webhooks.endpoints SET failing_since = NULL, updated_at = now() WHERE id = 'ep1'`)
	require.NoError(t, err)

	late := rec("d2", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	late.StartedAt = first.StartedAt.Add(-500 * time.Millisecond)
	type result struct {
		res store.WriteAttemptsResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{
			Records: []*attempt.Record{late}, Now: t0.Add(100 * time.Hour), DisableAfter: 72 * time.Hour,
		})
		done <- result{res, err}
	}()
	// The batch waits for the other writer's uncommitted endpoint health.
	waitForLockWait(t, db)
	require.NoError(t, otherTx.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.res.Inserted[late.AttemptID])
	require.Empty(t, r.res.Disabled, "an endpoint that answered 200 after the failures is not disabled")
	ep, err = db.Store.GetEndpoint(ctx, "ep1")
	require.NoError(t, err)
	require.Equal(t, endpoint.StatusActive, ep.Status)
	require.True(t, ep.FailingSince.IsZero(), "the success ended the failing, a failure before it does not restart it: failing since %s", ep.FailingSince)
}

// TestWriteAttemptsWritesDeliveryIDsThatCleanAlike: two attempts whose
// delivery ids differ only by what staging cleans out (a NUL byte, invalid
// UTF-8) are of one delivery once staged. The batch writes them as one
// delivery with two attempts; it must not insert the row twice (a unique
// violation of the batch's own making, which no retry can get past: the
// writer would retry it forever and log nothing more).
func TestWriteAttemptsWritesDeliveryIDsThatCleanAlike(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")

	a := rec("dx", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	b := rec("dx\x00", "ep1", 2, attempt.OutcomeDelivered, attempt.NextDone)
	c := rec("dy\xff", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	d := rec("dy\xfe", "ep1", 2, attempt.OutcomeDelivered, attempt.NextDone)
	res := write(t, db, t0, a, b, c, d)
	require.Len(t, res.Inserted, 4)
	for _, id := range []string{"dx", "dy\uFFFD"} {
		got := getDelivery(t, db, id)
		require.Equal(t, "delivered", got.Status, id)
		require.Equal(t, 2, got.Attempts, id)
		require.Equal(t, 2, countAttempts(t, db, id), id)
	}
}

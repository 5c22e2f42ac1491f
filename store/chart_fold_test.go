package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// rollupRows renders webhooks.attempt_hours, every account.
func rollupRows(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	var out string
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT COALESCE(string_agg(
			format('%s %s %s %s %s %s', account, endpoint_id, hour, delivered, failed, latency), E'\n' ORDER BY account, endpoint_id, hour), '')
		FROM webhooks.attempt_hours`).Scan(&out))
	return out
}

func stagedBatches(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.attempt_hours_pending`).Scan(&n))
	return n
}

// hoursLoad is 300 deliveries at 5 endpoints over 3 hours: a third failing
// once then delivered by a second attempt, some dead-lettered, a deferred
// record (no request: never charted), and one attempt of another account
// at ep1 (charted under its own account, as the log keeps it).
func hoursLoad(base time.Time) []*attempt.Record {
	var recs []*attempt.Record
	for i := range 300 {
		d, ep := fmt.Sprintf("d%03d", i), fmt.Sprintf("ep%d", i%5)
		at := base.Add(time.Duration(i) * 35 * time.Second)
		add := func(n int, o attempt.Outcome, next attempt.NextAction, dur time.Duration) {
			r := rec(d, ep, n, o, next)
			r.StartedAt, r.Duration = at.Add(time.Duration(n-1)*time.Minute), dur
			recs = append(recs, r)
		}
		switch {
		case i%3 == 0:
			add(1, attempt.OutcomeRetry, attempt.NextRetry, time.Duration(5+i%40)*time.Millisecond)
			add(2, attempt.OutcomeDelivered, attempt.NextDone, time.Duration(20+i*13%700)*time.Millisecond)
		case i%11 == 0:
			add(1, attempt.OutcomePermanent, attempt.NextDeadLetter, 3*time.Millisecond)
		case i%17 == 0:
			add(1, attempt.OutcomeDeferred, attempt.NextRetry, 0)
		default:
			add(1, attempt.OutcomeDelivered, attempt.NextDone, time.Duration(1+i*37%900)*time.Millisecond)
		}
	}
	foreign := rec("x1", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
	foreign.Account, foreign.StartedAt = "acct_2", base.Add(time.Minute)
	return append(recs, foreign)
}

// Two writers log the same load in different batches and orders (every
// record at least twice, some twice in one batch) while a third session
// folds over and over: the rollup then equals RebuildAttemptHours's, and
// the charts read the same before the last fold as after the rebuild.
func TestAttemptHoursFoldEqualsRebuild(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for i := range 5 {
		addEndpoint(t, db, fmt.Sprintf("ep%d", i))
	}
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	recs := hoursLoad(base)

	writeAll := func(seed uint64) error {
		rng := rand.New(rand.NewPCG(seed, 1))
		order := rng.Perm(len(recs))
		for lo := 0; lo < len(order); {
			hi := min(lo+1+rng.IntN(60), len(order))
			var batch []*attempt.Record
			for _, k := range order[lo:hi] {
				batch = append(batch, recs[k])
			}
			if len(batch) > 1 {
				batch = append(batch, batch[0]) // twice in one batch
			}
			// Two writers of one delivery can collide on its row (an
			// error worth retrying, as the attempt-log writer does).
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: batch, Now: time.Now()})
				if err == nil {
					break
				}
				if errors.Is(err, store.ErrInvalidData) || time.Now().After(deadline) {
					return err
				}
			}
			lo = hi
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	stop := make(chan struct{})
	for _, seed := range []uint64{1, 2} {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- writeAll(seed) }()
	}
	type foldTotal struct {
		batches int64
		err     error
	}
	folds := make(chan foldTotal, 1)
	go func() {
		var tot foldTotal
		for tot.err == nil {
			select {
			case <-stop:
				folds <- tot
				return
			default:
			}
			res, err := db.Store.FoldAttemptHours(ctx)
			tot.batches, tot.err = tot.batches+res.Batches, err
		}
		folds <- tot
	}()
	wg.Wait()
	close(stop)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	tot := <-folds
	require.NoError(t, tot.err, "a fold failed (two writers and a fold must never deadlock)")
	require.Positive(t, tot.batches, "some batches were folded while others were written")

	charted := chartCounts(t, db, base)
	_, err := db.Store.FoldAttemptHours(ctx)
	require.NoError(t, err)
	require.Zero(t, stagedBatches(t, db))
	folded := rollupRows(t, db)
	require.Contains(t, folded, "acct_2 ep1 ")
	require.NoError(t, db.Store.RebuildAttemptHours(ctx))
	require.Equal(t, rollupRows(t, db), folded, "the folded rollup is the log's")
	require.Equal(t, charted, chartCounts(t, db, base), "the charts before the last fold are the rebuilt rollup's")
}

// A fold whose session dies half-way (terminated while it waits for a lock
// on the rollup) leaves the deltas it took staged: the charts still count
// them, and the next fold adds them once.
func TestAttemptHoursFoldFailureKeepsDeltas(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	write := func(ids ...string) {
		var batch []*attempt.Record
		for i, id := range ids {
			r := rec(id, "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
			r.StartedAt, r.Duration = base.Add(time.Duration(i)*time.Minute), time.Duration(10+i)*time.Millisecond
			batch = append(batch, r)
		}
		_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: batch, Now: time.Now()})
		require.NoError(t, err)
	}
	write("d1", "d2")
	_, err := db.Store.FoldAttemptHours(ctx)
	require.NoError(t, err)
	write("d3", "d4", "d5")
	before := chartCounts(t, db, base)
	require.Contains(t, before, "5/0 ")

	// Another session holds the rollup's row: the fold waits on it, and is
	// terminated there.
	locker, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM webhooks.attempt_hours FOR UPDATE`)
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() { _, err := db.Store.FoldAttemptHours(ctx); failed <- err }()
	// The fold's session is the one client backend the locker blocks (by
	// pid, not by query text: an autovacuum worker's text names the table
	// too). A fold that ended before it waited fails the test with its
	// result rather than a timeout.
	var terminated bool
	var early error
	wait.For(t, 30*time.Second, "the fold to wait for the row lock and be terminated", func() bool {
		select {
		case err := <-failed:
			early = err
			return true
		default:
		}
		require.NoError(t, locker.QueryRow(ctx, `SELECT COALESCE(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pg_backend_pid() = ANY (pg_blocking_pids(pid))`).Scan(&terminated))
		return terminated
	})
	require.True(t, terminated, "the fold ended before it waited for the row lock: %v", early)
	require.Error(t, <-failed)
	require.NoError(t, tx.Rollback(ctx))

	require.Equal(t, 1, stagedBatches(t, db), "the deltas the fold took are staged again")
	require.Equal(t, before, chartCounts(t, db, base), "the charts still count them")
	res, err := db.Store.FoldAttemptHours(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Batches)
	require.Equal(t, before, chartCounts(t, db, base), "folded once")
	folded := rollupRows(t, db)
	require.NoError(t, db.Store.RebuildAttemptHours(ctx))
	require.Equal(t, rollupRows(t, db), folded)
}

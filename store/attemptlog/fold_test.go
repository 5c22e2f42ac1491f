package attemptlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/store/attemptlog"
)

// chartedAttempts is what the rollup (folded rows only) counts.
const chartedAttempts = `SELECT COALESCE(sum(delivered + failed), 0)::int FROM webhooks.attempt_hours`

// A writer that stops gracefully folds what it staged: nothing is left
// for a next writer, and the rollup counts every attempt once.
func TestWriterFoldsHourlyRollupWhenStopping(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addEndpoint(t, "ep1")
	recs := history("f", "ep1", 20) // 50 attempts, all made a request
	b.produce(t, recs...)
	stop := b.startWriter(t, attemptlog.Config{MaxBatch: 10, FoldInterval: time.Hour}, b.reg)
	eventually(t, 20*time.Second, "every attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs)
	})
	require.Positive(t, b.queryInt(t, `SELECT count(*) FROM webhooks.attempt_hours_pending`))
	require.Zero(t, b.queryInt(t, chartedAttempts), "no fold within the hour")
	stop()
	require.Zero(t, b.queryInt(t, `SELECT count(*) FROM webhooks.attempt_hours_pending`))
	require.Equal(t, len(recs), b.queryInt(t, chartedAttempts))
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_attempt_hours_folds_total", "ok"))
	require.Positive(t, metrictest.Value(t, b.reg, "hookd_attempt_hours_folded_batches_total"))
}

// A fold that fails (here: it times out waiting for a lock another session
// holds on the rollup) is counted, keeps its deltas staged, and the next
// fold adds them, once.
func TestWriterRetriesFailedFolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addEndpoint(t, "ep1")
	recs := history("g", "ep1", 40) // 100 attempts
	b.produce(t, recs[:50]...)
	b.startWriter(t, attemptlog.Config{FoldInterval: 20 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}, b.reg)
	eventually(t, 20*time.Second, "the first attempts folded", func() bool {
		return b.queryInt(t, chartedAttempts) == 50
	})

	ctx := context.Background()
	locker, err := pgx.Connect(ctx, b.db.URL)
	require.NoError(t, err)
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM webhooks.attempt_hours FOR UPDATE`)
	require.NoError(t, err)
	b.produce(t, recs[50:]...)
	eventually(t, 20*time.Second, "a fold to fail with the rest staged", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs) &&
			metrictest.Value(t, b.reg, "hookd_attempt_hours_folds_total", "failed") >= 1
	})
	require.Positive(t, b.queryInt(t, `SELECT count(*) FROM webhooks.attempt_hours_pending`))
	require.Equal(t, 50, b.queryInt(t, chartedAttempts))
	require.NoError(t, tx.Rollback(ctx))

	eventually(t, 20*time.Second, "the staged deltas folded by a later fold", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempt_hours_pending`) == 0
	})
	require.Equal(t, len(recs), b.queryInt(t, chartedAttempts), "every attempt counted once")
}

package maintenance_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/maintenance"
)

func TestMaintainerKeepsPartitionsAheadAndDropsExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	// An expired partition left from 40 days ago.
	_, err := db.Store.MaintainAttemptPartitions(ctx, now.AddDate(0, 0, -40), 1, 60*24*time.Hour)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	m, err := maintenance.NewMaintainer(maintenance.MaintainerConfig{Ahead: 2, Interval: 20 * time.Millisecond},
		maintenance.MaintainerDeps{Store: db.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
			Clock: fakeclock.New(now)})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	wait.For(t, 10*time.Second, "partitions maintained", func() bool {
		return metrictest.Value(t, reg, "hookd_attempt_partition_maintenance_last_success_timestamp_seconds") == float64(now.Unix())
	})
	names, err := db.Store.AttemptPartitions(ctx)
	require.NoError(t, err)
	for _, want := range []string{"attempts_p20260310", "attempts_p20260311", "attempts_p20260312"} {
		require.True(t, slices.Contains(names, want), "%s missing from %v", want, names)
	}
	require.False(t, slices.Contains(names, "attempts_p20260129"), "expired partition kept: %v", names)
	require.Equal(t, 2.0, metrictest.Value(t, reg, "hookd_attempt_partitions_dropped_total"))
}

// The attempts delivery rows hold are erased with their day: after a pass,
// the a_* columns of the rows whose attempt started before the horizon are
// NULL in the table itself (not only hidden by the view), the newer ones
// are untouched, and the attempt log answers the same for the kept window.
func TestMaintainerErasesHeldAttemptsPastTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	old, kept := now.AddDate(0, 0, -40), now.AddDate(0, 0, -2)
	_, err := db.Store.MaintainAttemptPartitions(ctx, old, 45, 60*24*time.Hour)
	require.NoError(t, err)
	var recs []*attempt.Record
	for i := range 7 {
		recs = append(recs, heldRec(fmt.Sprintf("d_old%d", i), fmt.Sprintf("ep%d", i%3), old.Add(time.Duration(i)*time.Minute)))
		recs = append(recs, heldRec(fmt.Sprintf("d_new%d", i), fmt.Sprintf("ep%d", i%3), kept.Add(time.Duration(i)*time.Minute)))
	}
	_, err = db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Now: now, Records: recs})
	require.NoError(t, err)
	require.Equal(t, 14, heldCount(t, db, "TRUE"), "every delivery row holds its attempt")
	// The horizon moves past the old day (the view hides its attempts)
	// before the maintainer runs.
	_, err = db.Store.MaintainAttemptPartitions(ctx, now, 3, 30*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 14, heldCount(t, db, "TRUE"), "hidden by the view, still in the table")
	keptBefore := attemptLog(t, db)
	require.Len(t, keptBefore, 7)

	reg := prometheus.NewRegistry()
	m, err := maintenance.NewMaintainer(maintenance.MaintainerConfig{Interval: time.Hour},
		maintenance.MaintainerDeps{Store: db.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
			Clock: fakeclock.New(now)})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	wait.For(t, 10*time.Second, "maintenance pass", func() bool {
		return metrictest.Value(t, reg, "hookd_attempt_partition_maintenance_last_success_timestamp_seconds") == float64(now.Unix())
	})
	require.Zero(t, heldCount(t, db, "id LIKE 'd_old%'"), "held attempts older than the retention are erased")
	require.Equal(t, 7, heldCount(t, db, "id LIKE 'd_new%'"), "held attempts in the retention are kept")
	var partial int
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM webhooks.deliveries
		WHERE id LIKE 'd_old%' AND num_nonnulls(a_id, a_attempt, a_tier, a_started_at, a_duration_ms, a_status_code,
			a_outcome, a_error_class, a_error, a_response_excerpt, a_next_action, a_replay_id, a_destination, a_body_sha256) > 0`).Scan(&partial))
	require.Zero(t, partial, "every a_* column of an erased attempt is NULL")
	require.Equal(t, keptBefore, attemptLog(t, db), "the log answers the same for the kept window")
	require.Equal(t, 7.0, metrictest.Value(t, reg, "hookd_attempt_held_cleared_total"))
	require.Zero(t, metrictest.Value(t, reg, "hookd_attempt_partition_maintenance_errors_total"))
}

func heldRec(d, ep string, started time.Time) *attempt.Record {
	return &attempt.Record{
		AttemptID: d + "-a1", DeliveryID: d, EventID: "evt-" + d, EventType: "invoice.paid", EndpointID: ep,
		Account: "acct_1", EventCreated: started, Attempt: 1, Tier: "webhooks.deliveries", StartedAt: started,
		Duration: 25 * time.Millisecond, Outcome: attempt.OutcomeRetry, NextAction: attempt.NextRetry,
		StatusCode: 503, ErrorClass: "http_5xx", Error: "secret detail of " + d, ResponseExcerpt: "body of " + d,
		Destination: "https://receiver.example/" + d, NextDueAt: started.Add(30 * time.Second),
	}
}

// heldCount counts the delivery rows that hold an attempt, in the table.
func heldCount(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM webhooks.deliveries WHERE a_id IS NOT NULL AND `+where).Scan(&n))
	return n
}

// attemptLog renders the attempt log (the view), row by row.
func attemptLog(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Store.Pool().Query(context.Background(), `SELECT a::text FROM webhooks.attempts a ORDER BY attempt_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

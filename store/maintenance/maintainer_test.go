package maintenance_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/wait"
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

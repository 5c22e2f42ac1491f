package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// Every daemon records its topic layout at start-up, where hookctl reads
// it (hookctl topics list without --retry-schedule).
func TestStartupRecordsTheInstallation(t *testing.T) {
	cfg := config(t)
	sched, err := retrytiers.ParseSchedule("2s,4s")
	require.NoError(t, err)
	cfg.Topics.Schedule = sched
	ctx, cancel := context.WithCancel(context.Background())
	var got store.Installation
	reader := func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		got, err = env.Store.GetInstallation(ctx, "webhooks")
		return roleFunc{"reader", func(ctx context.Context) error { cancel(); <-ctx.Done(); return nil }}, err
	}
	require.NoError(t, daemon.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), []daemon.RoleFactory{reader}))
	require.Equal(t, "2s,4s", got.RetrySchedule)
	require.Equal(t, []string{"webhooks.retry.2s", "webhooks.retry.4s"}, got.TierTopics)
	require.EqualValues(t, 2, got.Partitions)
	require.Contains(t, got.WrittenBy, "hookd ")
}

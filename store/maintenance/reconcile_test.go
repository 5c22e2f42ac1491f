package maintenance_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store/maintenance"
)

// syncBuffer is a log sink safe to read while the role writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReconcilerReportsOverdueDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, event_created_at, status, next_due_at, created_at) VALUES
		('on-time', 'e1', 'ep1', 'a', 't', $1, 'retrying', $1::timestamptz + interval '5 minutes', $1::timestamptz - interval '1 minute'),
		('pending', 'e2', 'ep1', 'a', 't', $1, 'pending',  NULL, $1::timestamptz - interval '2 minutes'),
		('overdue', 'e3', 'ep1', 'a', 't', $1, 'retrying', $1::timestamptz - interval '2 minutes', $1::timestamptz - interval '10 minutes')`, now)
	require.NoError(t, err)

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	sched, err := retrytiers.ParseSchedule("1s,2s,4s")
	require.NoError(t, err)
	r, err := maintenance.NewReconciler(maintenance.ReconcilerConfig{Interval: 20 * time.Millisecond, DueGrace: time.Minute, Schedule: sched},
		maintenance.ReconcilerDeps{Store: db.Store, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registerer: reg,
			Clock: fakeclock.New(now)})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains([]byte(logs.String()), []byte(`"msg":"deliveries overdue`)) {
		require.True(t, time.Now().Before(deadline), "no overdue report; logs: %s", logs.String())
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	// Max age defaults from the schedule (7s + 25% + 1m grace), so the
	// 10-minute-old retrying delivery is overdue twice over, the 2-minute-old
	// pending one only by age.
	require.Contains(t, logs.String(), `"count":2`)
	require.Contains(t, logs.String(), "overdue (endpoint ep1, retrying")
	require.NotContains(t, logs.String(), "on-time")
	require.Equal(t, 2.0, gauge(t, reg, "hookd_deliveries_overdue"))
	require.Equal(t, 120.0, gauge(t, reg, "hookd_delivery_oldest_pending_age_seconds"))
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, err := maintenance.NewReconciler(maintenance.ReconcilerConfig{MaxAge: time.Hour}, maintenance.ReconcilerDeps{})
	require.ErrorContains(t, err, "reconcile max age: must be at least the retry schedule's total (51h42m30s), got 1h0m0s")
}

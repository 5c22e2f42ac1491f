package maintenance_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/maintenance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMonitorDisablesSilentFailingEndpointsAndFlushesOwedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tcfg := topics.Config{Partitions: 1}
	names := topics.NamesFor(tcfg)
	kafka := kafkatest.NewProvisioned(t, tcfg)
	db := pgtest.New(t)
	for _, ep := range []string{"ep-silent", "ep-owed", "ep-fine"} {
		_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
			VALUES ($1, 'acct_1', 'https://example.com/'||$1, '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, ep)
		require.NoError(t, err)
	}
	// ep-silent failed once, three days and more ago, and then got no attempt.
	_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Now: t0, DisableAfter: 72 * time.Hour,
		Records: []*attempt.Record{{AttemptID: "a1", DeliveryID: "d1", EventID: "e1", EndpointID: "ep-silent", Account: "acct_1", Attempt: 1,
			Tier: "webhooks.deliveries", StartedAt: t0, Outcome: attempt.OutcomeRetry, NextAction: attempt.NextRetry, NextDueAt: t0}}})
	require.NoError(t, err)
	// ep-owed was disabled (here by hand, as another tool would) and its
	// event never produced.
	_, err = db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET status = 'disabled',
		disabled_reason = 'manual: operator request', disabled_at = $1 WHERE id = 'ep-owed'`, t0)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	clk := fakeclock.New(t0.Add(72*time.Hour + time.Second))
	mon, err := maintenance.NewMonitor(maintenance.MonitorConfig{OpsTopic: names.Ops, EventsTopic: names.Events, Interval: 50 * time.Millisecond}, maintenance.MonitorDeps{
		Store: db.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg, Clock: clk,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(kafka.Addrs...)},
	})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mon.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	cl := kafka.Client(t, kgo.ConsumeTopics(names.Ops), kgo.FetchMaxWait(100*time.Millisecond))
	got := map[string]maintenance.Event{}
	pollCtx, pollCancel := context.WithTimeout(ctx, 20*time.Second)
	defer pollCancel()
	for len(got) < 2 {
		fs := cl.PollFetches(pollCtx)
		require.NoError(t, pollCtx.Err(), "events so far: %v", got)
		for _, r := range fs.Records() {
			ev, err := maintenance.DecodeEvent(r)
			require.NoError(t, err)
			got[ev.EndpointID] = ev
		}
	}
	require.Equal(t, "failing", got["ep-silent"].Reason)
	require.True(t, got["ep-silent"].FailingSince.Equal(t0))
	require.Equal(t, "manual", got["ep-owed"].Reason)
	require.Equal(t, "manual: operator request", got["ep-owed"].Detail)
	require.NotContains(t, got, "ep-fine")

	deadline := time.Now().Add(10 * time.Second)
	for {
		owed, err := db.Store.PendingDisabledNotifications(ctx, 10)
		require.NoError(t, err)
		if len(owed) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "events still owed: %v", owed)
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	h, err := db.Store.GetEndpointHealth(ctx, "ep-fine")
	require.NoError(t, err)
	require.Equal(t, "active", h.Status)
}

func TestEventFormat(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)
	ev := maintenance.DisabledEvent(store.DisabledEndpoint{ID: "ep_1", Account: "acct_1", URL: "https://x.example/h",
		Reason: "gone", Detail: "gone: the endpoint answered 410 Gone", DisabledAt: at})
	r, err := ev.Record("webhooks.ops")
	require.NoError(t, err)
	require.Equal(t, "ep_1", string(r.Key))
	require.JSONEq(t, `{"id":"endpoint.disabled:ep_1:1767484800000000000","type":"endpoint.disabled",
		"endpoint_id":"ep_1","account":"acct_1","url":"https://x.example/h","reason":"gone",
		"detail":"gone: the endpoint answered 410 Gone","disabled_at":"2026-01-04T00:00:00Z"}`, string(r.Value))
}

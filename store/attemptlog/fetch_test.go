package attemptlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store/attemptlog"
)

// The writer's fetches ask the broker to wait for 256 KiB, at most its
// BatchWait (capped at 100ms, at least 10ms), instead of being answered at
// the first record: fewer, larger fetches. The operator's kgo options still
// override both. Fails when fetches are answered at the first byte or wait
// kgo's default.
func TestWriterFetchesWaitForABatch(t *testing.T) {
	for _, tc := range []struct {
		name              string
		batchWait         time.Duration
		opts              []kgo.Opt
		minBytes, maxWait int32
	}{
		{"default", 0, nil, 256 << 10, 100},
		{"short batch wait", 40 * time.Millisecond, nil, 256 << 10, 40},
		{"no batch wait", -1, nil, 256 << 10, 10},
		{"operator's", 0, []kgo.Opt{kgo.FetchMinBytes(1), kgo.FetchMaxWait(300 * time.Millisecond)}, 1, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			firstFetch := b.kafka.FirstFetch(t, 30*time.Second)
			w, err := attemptlog.New(attemptlog.Config{Topic: b.names.Attempts, DeliveriesTopic: b.names.Deliveries,
				OpsTopic: b.names.Ops, EventsTopic: b.names.Events, BatchWait: tc.batchWait}, attemptlog.Deps{
				Store: b.db.Store, Logger: b.logger, Registerer: prometheus.NewRegistry(), Clock: b.clock,
				KafkaOpts: append([]kgo.Opt{kgo.SeedBrokers(b.kafka.Addrs...)}, tc.opts...),
			})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			req := firstFetch()
			require.Equal(t, tc.minBytes, req.MinBytes, "MinBytes")
			require.Equal(t, tc.maxWait, req.MaxWaitMillis, "MaxWaitMillis")
		})
	}
}

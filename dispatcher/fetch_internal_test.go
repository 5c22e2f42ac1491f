package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
)

// The dispatcher's fetches ask the broker to wait for fetchMinBytes, at
// most fetchMaxWait (fewer, larger fetches while records stream in), and
// for at most fetchMaxPartitionBytes of each partition (what a pause
// drops); the operator's kgo options still override them. Fails when the
// fetches are answered at the first byte (MinBytes 1), wait kgo's 500ms or
// take kgo's 1 MiB of a partition.
func TestFetchBatching(t *testing.T) {
	s, err := retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	require.NoError(t, err)
	tcfg := topics.Config{Prefix: "webhooks", Partitions: 2, Schedule: s}
	for _, tc := range []struct {
		name                         string
		opts                         []kgo.Opt
		minBytes, maxWait, partBytes int32
	}{
		{"dispatcher's", nil, 64 << 10, 10, 64 << 10},
		{"operator's", []kgo.Opt{kgo.FetchMinBytes(1), kgo.FetchMaxWait(200 * time.Millisecond),
			kgo.FetchMaxPartitionBytes(1 << 20)}, 1, 200, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.NewProvisioned(t, tcfg)
			firstFetch := c.FirstFetch(t, 30*time.Second)
			d, err := New(Config{Group: "g-fetch", Topics: tcfg}, Deps{
				Endpoints: noEndpoints{},
				Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
				KafkaOpts: append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...)}, tc.opts...),
			})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			req := firstFetch()
			require.Equal(t, tc.minBytes, req.MinBytes, "MinBytes")
			require.Equal(t, tc.maxWait, req.MaxWaitMillis, "MaxWaitMillis")
			require.NotEmpty(t, req.Topics)
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					require.Equal(t, tc.partBytes, rp.PartitionMaxBytes, "PartitionMaxBytes")
				}
			}
		})
	}
}

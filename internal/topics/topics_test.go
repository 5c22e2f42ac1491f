package topics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
)

func TestNamesFor(t *testing.T) {
	t.Parallel()
	sched, err := retrytiers.ParseSchedule("30s,2m,24h")
	require.NoError(t, err)
	n := topics.NamesFor(topics.Config{Schedule: sched})
	require.Equal(t, "webhooks.events", n.Events)
	require.Equal(t, "webhooks.deliveries", n.Deliveries)
	require.Equal(t, []string{"webhooks.retry.30s", "webhooks.retry.2m", "webhooks.retry.24h"}, n.Retry)
	require.Equal(t, "webhooks.dlq", n.DLQ)
}

func TestProvisionIsIdempotentAndChecksPartitions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	// kgo caches metadata for a few seconds, so each step uses a fresh
	// client, as separate hookd start-ups would.
	adm := func() *kadm.Client { return kadm.NewClient(c.Client(t)) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := topics.Config{Partitions: 6}
	first, err := topics.Provision(ctx, adm(), cfg)
	require.NoError(t, err)
	require.Len(t, first.Created, len(topics.Specs(cfg)))
	require.Empty(t, first.Existing)

	second, err := topics.Provision(ctx, adm(), cfg)
	require.NoError(t, err)
	require.Empty(t, second.Created)
	require.Len(t, second.Existing, len(topics.Specs(cfg)))

	infos, err := topics.List(ctx, adm(), cfg)
	require.NoError(t, err)
	for _, info := range infos {
		require.False(t, info.Missing, info.Name)
		want := 6
		if info.Name == "webhooks.ops" || info.Name == "webhooks.intents" {
			want = 1
		}
		require.Equal(t, want, info.Partitions, info.Name)
	}
	require.Equal(t, "webhooks.retry.24h", infos[len(infos)-5].Name)
	require.Equal(t, "192h", infos[len(infos)-5].Retention, "24h tier keeps delay + 7 days")
	require.Equal(t, "720h", infos[len(infos)-4].Retention, "DLQ keeps 30 days")

	_, err = topics.Provision(ctx, adm(), topics.Config{Partitions: 12})
	require.ErrorContains(t, err, "topic webhooks.events has 6 partitions but --partitions is 12")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  topics.Config
		want string
	}{
		{topics.Config{Prefix: "bad prefix"}, "topic prefix"},
		{topics.Config{Partitions: -3}, "partitions: must be between 1 and 10000, got -3"},
		{topics.Config{DLQRetention: time.Hour}, "dlq retention"},
	} {
		tc.cfg.SetDefaults()
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}

package topics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
)

func TestProvisionSetsReplicationAndMinISR(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, kfake.NumBrokers(3))
	adm := kadm.NewClient(c.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := topics.Config{Partitions: 3, ReplicationFactor: 3}
	_, err := topics.Provision(ctx, adm, cfg)
	require.NoError(t, err)
	names := make([]string, 0)
	for _, s := range topics.Specs(cfg) {
		names = append(names, s.Name)
	}
	details, err := adm.ListTopics(ctx, names...)
	require.NoError(t, err)
	for _, n := range names {
		for _, p := range details[n].Partitions {
			require.Len(t, p.Replicas, 3, "%s partition %d", n, p.Partition)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	require.NoError(t, err)
	require.Len(t, rcs, len(names))
	for _, rc := range rcs {
		v, err := rc.Configs, rc.Err
		require.NoError(t, err)
		found := false
		for _, c := range v {
			if c.Key == "min.insync.replicas" {
				found = true
				require.Equal(t, "2", *c.Value, "%s: RF 3 defaults min.insync.replicas to 2", rc.Name)
			}
		}
		require.True(t, found, rc.Name)
	}
}

func TestProvisionReplicationAboveBrokerCountIsClear(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t) // one broker
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := topics.Provision(ctx, kadm.NewClient(c.Client(t)), topics.Config{Partitions: 1, ReplicationFactor: 3})
	require.ErrorContains(t, err, "creating topic webhooks.events: replication factor 3 is more than the cluster's brokers; lower --replication-factor")
}

func TestMinISRDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	for rf, want := range map[int16]int16{-1: -1, 1: 1, 2: 1, 3: 2, 5: 2} {
		cfg := topics.Config{ReplicationFactor: rf}
		cfg.SetDefaults()
		require.Equal(t, want, cfg.MinInsyncReplicas, "RF %d", rf)
		require.NoError(t, cfg.Validate())
	}
	for _, tc := range []struct {
		cfg  topics.Config
		want string
	}{
		{topics.Config{ReplicationFactor: 2, MinInsyncReplicas: 3}, "min insync replicas: 3 exceeds the replication factor 2"},
		{topics.Config{ReplicationFactor: 3, MinInsyncReplicas: -4}, "min insync replicas: must be -1 (broker default) or at least 1, got -4"},
		{topics.Config{ReplicationFactor: -7}, "replication factor: must be -1 (broker default) or at least 1, got -7"},
	} {
		tc.cfg.SetDefaults()
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}

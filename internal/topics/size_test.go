package topics_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
)

// TestProvisionSetsMaxMessageBytes: every topic hookd creates carries an
// explicit max.message.bytes, and the broker (kfake honours the topic
// setting) refuses a larger record with MESSAGE_TOO_LARGE instead of
// accepting it.
func TestProvisionSetsMaxMessageBytes(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		cfg  topics.Config
		want string
	}{
		{topics.Config{Partitions: 1}, "1048588"},
		{topics.Config{Prefix: "big", Partitions: 1, MaxMessageBytes: 1_500_000}, "1500000"},
	} {
		adm := kadm.NewClient(c.Client(t))
		_, err := topics.Provision(ctx, adm, tc.cfg)
		require.NoError(t, err)
		var names []string
		for _, s := range topics.Specs(tc.cfg) {
			names = append(names, s.Name)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, names...)
		require.NoError(t, err)
		require.Len(t, rcs, len(names))
		for _, rc := range rcs {
			require.NoError(t, rc.Err)
			found := false
			for _, cv := range rc.Configs {
				if cv.Key == "max.message.bytes" {
					found = true
					require.Equal(t, tc.want, *cv.Value, rc.Name)
					require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, cv.Source, "%s: set explicitly, not the broker default", rc.Name)
				}
			}
			require.True(t, found, rc.Name)
		}
	}

	// A client allowed to build bigger batches (as some producers are)
	// gets the broker's refusal; kfake compares the (compressed) batch to
	// the topic's own setting, so the values are incompressible.
	cl := c.Client(t, kgo.ProducerBatchMaxBytes(4<<20), kgo.BrokerMaxWriteBytes(8<<20))
	produce := func(topic string, n int) error {
		v := make([]byte, n)
		_, _ = rand.Read(v)
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr()
	}
	require.ErrorIs(t, produce("webhooks.events", 1_100_000), kerr.MessageTooLarge)
	require.NoError(t, produce("webhooks.events", 1_000_000))
	require.NoError(t, produce("big.events", 1_400_000))
	require.ErrorIs(t, produce("big.events", 1_600_000), kerr.MessageTooLarge)
}

func TestProvisionRefusesTooSmallMaxMessageBytes(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := kadm.NewClient(c.Client(t)).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("100000")}, "webhooks.events")
	require.NoError(t, err)
	_, err = topics.Provision(ctx, kadm.NewClient(c.Client(t)), topics.Config{Partitions: 1})
	require.ErrorContains(t, err, "topic webhooks.events has max.message.bytes 100000, below the 1000012 hookd needs")
	require.NotContains(t, err.Error(), "\n")
}

func TestMaxMessageBytesValidation(t *testing.T) {
	t.Parallel()
	cfg := topics.Config{MaxMessageBytes: 65536}
	cfg.SetDefaults()
	require.ErrorContains(t, cfg.Validate(), "max message bytes: must be between 1000012 and 1073741824, got 65536")
}

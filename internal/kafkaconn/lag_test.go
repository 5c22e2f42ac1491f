package kafkaconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/kafkatest"
)

func TestGroupCollectorLagAndMembers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, kfake.SeedTopics(2, "webhooks.deliveries"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod := c.Client(t)
	produce := func(n int) {
		for range n {
			require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: "webhooks.deliveries", Value: []byte("x")}).FirstErr())
		}
	}
	produce(5)

	reg := prometheus.NewRegistry()
	reg.MustRegister(kafkaconn.NewGroupCollector(c.Client(t), []string{"hookd-dispatchers"}, 5*time.Second))
	gauge := func(name string, labels ...string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metrics:
			for _, m := range mf.GetMetric() {
				for i, l := range m.GetLabel() {
					if l.GetValue() != labels[i] {
						continue metrics
					}
				}
				return m.GetGauge().GetValue()
			}
		}
		return -1
	}

	// A member that reads and commits everything.
	cons := c.Client(t, kgo.ConsumerGroup("hookd-dispatchers"), kgo.ConsumeTopics("webhooks.deliveries"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	read := 0
	for read < 5 {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		read += fs.NumRecords()
	}
	require.NoError(t, cons.CommitUncommittedOffsets(ctx))
	require.Equal(t, 1.0, gauge("hookd_kafka_consumer_group_members", "hookd-dispatchers"))
	require.Equal(t, 0.0, gauge("hookd_kafka_consumer_group_lag_records", "hookd-dispatchers", "webhooks.deliveries"))

	cons.Close()
	produce(3)
	require.Equal(t, 0.0, gauge("hookd_kafka_consumer_group_members", "hookd-dispatchers"), "an empty group")
	require.Equal(t, 3.0, gauge("hookd_kafka_consumer_group_lag_records", "hookd-dispatchers", "webhooks.deliveries"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "hookd_kafka_consumer_group_describe_errors_total" {
			require.Equal(t, 0.0, mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
}

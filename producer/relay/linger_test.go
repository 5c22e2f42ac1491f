package relay_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/producer/relay"
)

// The relay sends a transaction's rows within its own short linger, not
// the shared client options' linger: with a linger of a minute in them, a
// committed row is on the events topic within seconds.
func TestRelayDoesNotWaitOutSharedLinger(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	r, err := relay.New(e.relayConfig(), relay.Deps{Store: e.db.Store,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...), kgo.ProducerLinger(time.Minute)},
		Logger:    e.logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	start(t, r.Run)
	e.waitStreaming(t)
	e.insert(t, "evt_linger", "acct_1", "invoice.paid", true)
	waitFor(t, "the row on the events topic (a minute's linger not waited out)", 15*time.Second, func() bool {
		return events.eventIDs(t)["evt_linger"] == 1
	})
}

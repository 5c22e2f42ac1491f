package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/delivery"
)

// produceTo writes deliveries to partition 0 of topic.
func (b *bundle) produceTo(topic string, ds ...*delivery.Delivery) {
	b.t.Helper()
	cl := b.cluster.Client(b.t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range ds {
		r := d.Record(topic)
		r.Partition = 0
		require.NoError(b.t, cl.ProduceSync(ctx, r).FirstErr())
	}
}

// gauge returns the value of the gauge name with label topic.
func gauge(t *testing.T, reg *prometheus.Registry, name, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == topic {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestTierOldestDueAge: the gauge is, per tier, the age of the oldest due
// record not yet started: 0 while records are not due or in flight; the
// time since its due time while it waits for its endpoint's slot, or
// behind a tier head that is not due yet.
func TestTierOldestDueAge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	clk := fakeclock.New(t0)
	release := make(chan struct{})
	rc := newReceiver(t, hangUntil(release))
	b.eps.set(dispatcher.Target{ID: "ep_one", URL: rc.srv.URL, MaxInFlight: 1, Timeout: 60 * time.Second})
	tier30s, tier2m := b.names.Retry[0], b.names.Retry[1]
	reg := prometheus.NewRegistry()
	const name = "hookd_dispatcher_tier_oldest_due_age_seconds"
	age := func(topic string) float64 { return gauge(t, reg, name, topic) }
	waitAge := func(topic string, want float64) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool { return age(topic) == want }, "%s on %s: %g, want %g", name, topic, age(topic), want)
	}
	retry := func(id string, due time.Duration) *delivery.Delivery {
		d := newDelivery(id, "ep_one")
		d.Attempt, d.FirstAttempt, d.LastStatus, d.DueAt = 2, t0.Add(-time.Minute), 503, t0.Add(due)
		return d
	}

	// On the 30s tier: A due at +10s, B at +20s. Neither is due. On the 2m
	// tier: C due at +100s heads the partition, D behind it is due at +50s
	// (an earlier due time behind a later one). Produced before the start
	// so that one fetch reads both records of each partition: once the
	// head is held, the partition is paused and nothing behind it is read.
	b.produceTo(tier30s, retry("evt_a", 10*time.Second), retry("evt_b", 20*time.Second))
	b.produceTo(tier2m, retry("evt_c", 100*time.Second), retry("evt_d", 50*time.Second))
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Timeout: time.Minute}, runOpts{clock: clk, reg: reg})
	for _, tier := range []string{tier30s, tier2m} {
		eventually(t, 20*time.Second, func() bool { return gauge(t, reg, "hookd_dispatcher_tier_waiting_records", tier) == 2 },
			"two waiting on %s", tier)
		waitAge(tier, 0)
	}

	clk.Set(t0.Add(10 * time.Second)) // A due: in flight (it blocks), B not due
	eventually(t, 20*time.Second, func() bool { return rc.count("evt_a") == 1 }, "A attempted")
	waitAge(tier30s, 0)

	clk.Set(t0.Add(25 * time.Second)) // B due, queued behind A for the endpoint's one slot
	waitAge(tier30s, 5)
	clk.Set(t0.Add(40 * time.Second))
	waitAge(tier30s, 20)

	waitAge(tier2m, 0)
	clk.Set(t0.Add(60 * time.Second))
	waitAge(tier2m, 10) // D is due, held behind C
	waitAge(tier30s, 40)

	close(release) // A answers, B goes in flight and answers
	eventually(t, 20*time.Second, func() bool { return rc.count("evt_b") == 1 }, "B attempted")
	waitAge(tier30s, 0)
	clk.Set(t0.Add(100 * time.Second)) // C and D released and attempted
	eventually(t, 20*time.Second, func() bool { return rc.count("evt_c") == 1 && rc.count("evt_d") == 1 }, "C and D attempted")
	waitAge(tier2m, 0)
	require.Zero(t, age(b.names.Retry[9]), "every tier is exported, 0 when nothing waits")
}

package dispatcher_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// TestBurstToHealthyEndpointsIsNeverDeferred is issue 28's burst through
// Kafka and HTTP: 3000 records to 40 healthy accounts (one endpoint each,
// answering in 5ms) on one partition, every account busy at its share
// (ceil(160/40) = 4, each endpoint's limit) and the partition filling up.
// Fetching pauses (backpressure); nothing goes to a retry tier. Before the
// fix, records of accounts at their share were deferred (fair_share) once
// the partition was half full.
func TestBurstToHealthyEndpointsIsNeverDeferred(t *testing.T) {
	t.Parallel()
	const accounts, perAccount = 40, 75
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, func(http.ResponseWriter, *http.Request) { time.Sleep(5 * time.Millisecond) })
	var ds []*delivery.Delivery
	for a := range accounts {
		b.eps.set(dispatcher.Target{ID: fmt.Sprintf("ep_%d", a), Account: fmt.Sprintf("acct_%d", a), URL: rc.srv.URL})
	}
	for n := range perAccount {
		for a := range accounts {
			d := newDelivery(fmt.Sprintf("evt_%d_%d", a, n), fmt.Sprintf("ep_%d", a))
			d.Account = fmt.Sprintf("acct_%d", a)
			ds = append(ds, d)
		}
	}
	b.produce(0, ds...)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Concurrency: 4 * accounts, PartitionMaxHeld: 200,
		MaxPollRecords: 100}, runOpts{reg: reg})
	eventually(t, 60*time.Second, func() bool { return rc.distinct() == len(ds) }, "every delivery made: %d", rc.distinct())
	eventually(t, 20*time.Second, func() bool { att, _, _ := b.col.snapshot(); return len(att) >= len(ds) }, "every attempt record")
	att, _, retries := b.col.snapshot()
	deferred := 0
	for _, a := range att {
		if a.Outcome == attempt.OutcomeDeferred {
			deferred++
		}
	}
	require.Zero(t, deferred, "healthy deliveries deferred")
	require.Empty(t, retries, "retry records")
	require.Zero(t, metrictest.Value(t, reg, "hookd_dispatcher_fair_share_deferred_total"))
}

package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
)

// TestFairShareAcrossAccounts is issue 11 item 3: an account whose
// endpoint sets max_in_flight 100000 on a receiver that never answers,
// with a backlog of 900, next to three healthy accounts (4 endpoints and
// 200 records each), 32 slots in all. The abusive account holds at most
// its share, ceil(32/4) = 8, while the others are active; every healthy
// delivery is done while its requests still hang. Once the others have
// been idle for AccountLinger, the abusive account alone may use every
// slot. Before the fix it took every slot as the healthy requests ended,
// and the healthy deliveries waited for its timeouts.
func TestFairShareAcrossAccounts(t *testing.T) {
	t.Parallel()
	const (
		concurrency        = 32
		healthyAccounts    = 3
		endpointsPerAcct   = 4
		recordsPerEndpoint = 50
		abusiveBacklog     = 900
		share              = concurrency / (healthyAccounts + 1)
	)
	b := setup(t, setupOpts{partitions: 1})
	evil, release := hangingReceiver(t)
	defer release()
	b.eps.set(dispatcher.Target{ID: "ep_evil", Account: "acct_evil", URL: evil.srv.URL, MaxInFlight: 100_000, Timeout: time.Hour})

	var healthy []*receiver
	var ds []*delivery.Delivery
	for a := range healthyAccounts {
		for e := range endpointsPerAcct {
			rc := newReceiver(t, nil)
			healthy = append(healthy, rc)
			id := fmt.Sprintf("ep_h%d_%d", a, e)
			b.eps.set(dispatcher.Target{ID: id, Account: fmt.Sprintf("acct_h%d", a), URL: rc.srv.URL})
		}
	}
	// Healthy records first on the one partition, so the abusive account
	// is never alone: alone, it may take every slot.
	for n := range recordsPerEndpoint {
		for a := range healthyAccounts {
			for e := range endpointsPerAcct {
				d := newDelivery(fmt.Sprintf("evt_h%d_%d_%d", a, e, n), fmt.Sprintf("ep_h%d_%d", a, e))
				d.Account = fmt.Sprintf("acct_h%d", a)
				ds = append(ds, d)
			}
		}
	}
	for n := range abusiveBacklog {
		d := newDelivery(fmt.Sprintf("evt_evil_%d", n), "ep_evil")
		d.Account = "acct_evil"
		ds = append(ds, d)
	}
	b.produce(0, ds...)

	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Concurrency: concurrency, Timeout: time.Hour,
		AccountLinger: 3 * time.Second}, runOpts{reg: reg})
	healthyDone := func() int {
		n := 0
		for _, rc := range healthy {
			n += int(rc.answered.Load())
		}
		return n
	}
	const want = healthyAccounts * endpointsPerAcct * recordsPerEndpoint
	// The abusive account's peak is read as the last healthy delivery is
	// seen: AccountLinger later it is alone and may take more.
	var peak int32
	eventually(t, 60*time.Second, func() bool {
		peak = evil.maxSeen.Load()
		return healthyDone() == want
	}, "every healthy delivery done")
	require.Zero(t, evil.answered.Load(), "the abusive account's requests still hang")
	require.LessOrEqual(t, peak, int32(share), "the abusive account never holds more than its share")
	require.Equal(t, int32(share), peak, "it uses its share")
	require.Positive(t, metrictest.Value(t, reg, "hookd_dispatcher_fair_share_waits_total"))
	for i, rc := range healthy {
		require.Equal(t, recordsPerEndpoint, rc.distinct(), "healthy endpoint %d", i)
	}

	// The healthy accounts go idle; after AccountLinger the abusive one is
	// alone and may use every slot (up to --max-endpoint-in-flight, 64).
	eventually(t, 30*time.Second, func() bool { return evil.inFlight.Load() == concurrency },
		"alone, the abusive account uses all %d slots", concurrency)
	eventually(t, 10*time.Second, func() bool { return metrictest.Value(t, reg, "hookd_dispatcher_active_accounts") == 1 },
		"one active account")
}

// TestFairShareKeepsPartitionsFlowing: an abusive account's records, held
// at its share of slots, would fill their partition (PartitionMaxHeld)
// and pause it, so that the healthy records behind them were never read
// (the hookbench tenancy phase found a sixth of the healthy deliveries
// waiting 40s that way). Once the partition is half full, the records of
// an account at its share go to the first retry tier instead (error class
// fair_share), and the partition keeps flowing.
func TestFairShareKeepsPartitionsFlowing(t *testing.T) {
	t.Parallel()
	const healthyAccounts, rounds, abusivePerRound = 3, 100, 5
	b := setup(t, setupOpts{partitions: 1})
	evil, release := hangingReceiver(t)
	defer release()
	b.eps.set(dispatcher.Target{ID: "ep_evil", Account: "acct_evil", URL: evil.srv.URL, MaxInFlight: 100_000, Timeout: time.Hour})
	healthy := newReceiver(t, nil)
	for a := range healthyAccounts {
		b.eps.set(dispatcher.Target{ID: fmt.Sprintf("ep_h%d", a), Account: fmt.Sprintf("acct_h%d", a), URL: healthy.srv.URL})
	}
	var ds []*delivery.Delivery
	for n := range rounds {
		for a := range healthyAccounts {
			d := newDelivery(fmt.Sprintf("evt_h%d_%d", a, n), fmt.Sprintf("ep_h%d", a))
			d.Account = fmt.Sprintf("acct_h%d", a)
			ds = append(ds, d)
		}
		for i := range abusivePerRound {
			d := newDelivery(fmt.Sprintf("evt_evil_%d_%d", n, i), "ep_evil")
			d.Account = "acct_evil"
			ds = append(ds, d)
		}
	}
	b.produce(0, ds...)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Concurrency: 32, Timeout: time.Hour,
		PartitionMaxHeld: 200, MaxPollRecords: 20}, runOpts{reg: reg})
	eventually(t, 60*time.Second, func() bool { return healthy.distinct() == healthyAccounts*rounds }, "every healthy delivery done")
	require.Zero(t, evil.answered.Load(), "the abusive account's requests still hang")
	require.LessOrEqual(t, evil.maxSeen.Load(), int32(32/(healthyAccounts+1)), "at most its share")
	require.Positive(t, metrictest.Value(t, reg, "hookd_dispatcher_fair_share_deferred_total"))
	eventually(t, 20*time.Second, func() bool {
		att, _, _ := b.col.snapshot()
		for _, a := range att {
			if a.ErrorClass == dispatcher.ClassFairShare {
				return true
			}
		}
		return false
	}, "an attempt record of a fair_share deferral")
}

// TestFairShareShedsAPartitionFilledAlone: an account alone (here with 16
// requests hanging, its endpoint's cap, of 32 slots) may fill a partition
// until it pauses; when another account becomes active (on another
// partition), the first one is at its share, its queued records in the
// full partition are deferred, and records of other accounts behind them
// are read and delivered while its requests still hang.
func TestFairShareShedsAPartitionFilledAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 2})
	evil, release := hangingReceiver(t)
	defer release()
	b.eps.set(dispatcher.Target{ID: "ep_evil", Account: "acct_evil", URL: evil.srv.URL, MaxInFlight: 100_000, Timeout: time.Hour})
	healthy := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_other_partition", Account: "acct_h0", URL: healthy.srv.URL})
	b.eps.set(dispatcher.Target{ID: "ep_same_partition", Account: "acct_h1", URL: healthy.srv.URL})
	var ds []*delivery.Delivery
	for n := range 400 {
		d := newDelivery(fmt.Sprintf("evt_evil_%d", n), "ep_evil")
		d.Account = "acct_evil"
		ds = append(ds, d)
	}
	b.produce(0, ds...)
	reg := prometheus.NewRegistry()
	b.start(dispatcher.Config{AllowPrivateNetworks: true, Concurrency: 32, MaxEndpointInFlight: 16, Timeout: time.Hour,
		PartitionMaxHeld: 200, MaxPollRecords: 50}, runOpts{reg: reg})
	eventually(t, 20*time.Second, func() bool {
		return evil.inFlight.Load() == 16 && heldRecords(t, reg, b.names.Deliveries, "0") >= 200
	}, "alone, the abusive account fills its partition")

	other, same := newDelivery("evt_other", "ep_other_partition"), newDelivery("evt_same", "ep_same_partition")
	other.Account, same.Account = "acct_h0", "acct_h1"
	b.produce(1, other)
	b.produce(0, same)
	eventually(t, 20*time.Second, func() bool { return healthy.count("evt_other") == 1 }, "the other partition's record")
	eventually(t, 20*time.Second, func() bool { return healthy.count("evt_same") == 1 }, "the record behind the full partition")
	require.Zero(t, evil.answered.Load())
	require.Positive(t, metrictest.Value(t, reg, "hookd_dispatcher_fair_share_deferred_total"))
}

// heldRecords returns hookd_dispatcher_held_records of one partition.
func heldRecords(t *testing.T, reg *prometheus.Registry, topic, partition string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "hookd_dispatcher_held_records" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["topic"] == topic && labels["partition"] == partition {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

package router_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
)

// instance is a router started by a test that stops it itself (a crash or
// a restart), with its own metrics.
type instance struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func (e *env) startInstance(t *testing.T, cfg router.Config) *instance {
	t.Helper()
	cfg.Topics = e.names
	in := &instance{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	r, err := router.New(cfg, router.Deps{Endpoints: e.index, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: e.logger, Registerer: in.reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- r.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop cancels the router and waits for Run to return nil.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	in.cancel()
	select {
	case err, ok := <-in.done:
		if ok {
			close(in.done)
			require.NoError(t, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancel")
	}
}

// deliveryCounts reads the deliveries topic read_committed until it holds
// want records, and counts each delivery id.
func (e *env) deliveryCounts(t *testing.T, want int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, r := range consume(t, e.kafka, e.names.Deliveries, want, 60*time.Second) {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		seen[d.ID]++
	}
	return seen
}

// holdCommitOf makes the broker hold the skip+1-th EndTxn that commits a
// transaction of txnID until let is called (also when t ends): the
// router's process "dies" while its commit is on the wire.
func (e *env) holdCommitOf(t *testing.T, txnID string, skip int64) (held *atomic.Int64, let func()) {
	t.Helper()
	held = &atomic.Int64{}
	release := make(chan struct{})
	var once sync.Once
	let = func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	var seen int64 // the cluster runs control functions serially
	e.kafka.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if req.TransactionalID == txnID && req.Commit {
			if seen++; seen == skip+1 {
				held.Add(1)
				e.kafka.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	return held, let
}

// A router killed while its transaction's commit is on the wire (its
// deliveries written, its offsets not yet committed) and replaced by
// another fans out every event exactly once, as a read_committed reader
// sees it: the dead router's open transaction is aborted (at once by the
// restarted router's InitProducerID when it has the same transactional
// id, by the transaction timeout otherwise), the new one fans the batch
// out again, and the dead router's commit, arriving late, commits nothing.
func TestCrashMidTransactionFansOutOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		restartedID   string
		crashedTxnTTL time.Duration
	}{
		// A restart of the same router: the open transaction is aborted
		// by the new one long before its 30s timeout.
		{"same_transactional_id", "router-a", 30 * time.Second},
		// Another router takes over: the transaction timeout aborts it.
		{"other_transactional_id", "router-b", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
			e.endpoint(t, "ep_b", "acct_1", endpoint.StatusActive)
			const events, perBatch = 100, 20
			vals := make([]string, events)
			for i := range vals {
				vals[i] = fmt.Sprintf(`{"id":"evt_%03d","account":"acct_1","type":"invoice.paid"}`, i)
			}
			e.produce(t, vals...)
			held, let := e.holdCommitOf(t, "router-a", 2)

			a := e.startInstance(t, router.Config{MaxPollRecords: perBatch, DrainTimeout: drainTimeout, TransactionalID: "router-a",
				TransactionTimeout: tc.crashedTxnTTL})
			wait.For(t, 30*time.Second, "the third transaction's commit to be on the wire", func() bool { return held.Load() == 1 })
			require.EqualValues(t, 2*perBatch, metrictest.Value(t, a.reg, "hookd_router_events_total", "fanned_out"))
			a.stop(t) // its commit never arrives while it runs

			start := time.Now()
			e.startInstance(t, router.Config{MaxPollRecords: perBatch, TransactionalID: tc.restartedID})
			seen := e.deliveryCounts(t, 2*events)
			t.Logf("%s: every event fanned out %s after the restart", tc.name, time.Since(start).Round(time.Millisecond))
			let() // the dead router's commit arrives now: fenced, or its transaction is gone
			e.waitCommitted(t, events)
			seen2 := e.deliveryCounts(t, 2*events)
			for _, s := range []map[string]int{seen, seen2} {
				require.Len(t, s, 2*events, "every delivery, none lost")
				for id, n := range s {
					require.Equal(t, 1, n, "delivery %s seen %d times by a read_committed reader", id, n)
				}
			}
			if tc.restartedID == "router-a" {
				require.Less(t, time.Since(start), 25*time.Second, "the restarted router waited for the transaction timeout")
			}
		})
	}
}

// The same envelope (same account and id) produced three times, and once
// more after the router restarts, is fanned out once: one delivery per
// subscribed endpoint. The three are dropped and counted by the first
// router (two of them in the same batch or a later one), the fourth by
// the second, which read the state back from the dedupe changelog. A
// repeat older than the window is a new event again.
func TestRepeatedEventIsFannedOutOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	e.endpoint(t, "ep_b", "acct_1", endpoint.StatusActive)
	const dup = `{"id":"evt_dup","account":"acct_1","type":"invoice.paid","data":{"n":1}}`
	cl := e.kafka.Client(t)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	produceAt := func(v string, ts time.Time) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(context.Background(),
			&kgo.Record{Topic: e.names.Events, Key: []byte("acct_1"), Value: []byte(v), Timestamp: ts}).FirstErr())
	}
	for i := range 3 {
		produceAt(dup, t0.Add(time.Duration(i)*time.Second))
	}
	produceAt(`{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`, t0.Add(3*time.Second))

	a := e.startInstance(t, router.Config{TransactionalID: "router-a"})
	seen := e.deliveryCounts(t, 4)
	require.Equal(t, map[string]int{
		delivery.ID("evt_dup", "ep_a"): 1, delivery.ID("evt_dup", "ep_b"): 1,
		delivery.ID("evt_1", "ep_a"): 1, delivery.ID("evt_1", "ep_b"): 1,
	}, seen)
	require.EqualValues(t, 2, metrictest.Value(t, a.reg, "hookd_router_duplicate_events_total"))
	a.stop(t)

	b := e.startInstance(t, router.Config{TransactionalID: "router-a"})
	produceAt(dup, t0.Add(4*time.Second))
	produceAt(`{"id":"evt_2","account":"acct_1","type":"invoice.paid"}`, t0.Add(5*time.Second))
	// Past the window (1h) from the first copy: a new event.
	produceAt(`{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`, t0.Add(time.Hour+4*time.Second))
	seen = e.deliveryCounts(t, 8)
	require.Equal(t, map[string]int{
		delivery.ID("evt_dup", "ep_a"): 1, delivery.ID("evt_dup", "ep_b"): 1,
		delivery.ID("evt_1", "ep_a"): 2, delivery.ID("evt_1", "ep_b"): 2,
		delivery.ID("evt_2", "ep_a"): 1, delivery.ID("evt_2", "ep_b"): 1,
	}, seen)
	wait.For(t, 10*time.Second, "the second router to count its duplicate", func() bool {
		return metrictest.Value(t, b.reg, "hookd_router_duplicate_events_total") == 1
	})
	require.EqualValues(t, 2, metrictest.Value(t, b.reg, "hookd_router_events_total", "fanned_out"))
}

// An event an application's transaction rolled back is never fanned out:
// the router reads the events topic read_committed. Once the next event,
// committed after it on the same partition, is delivered, the rolled-back
// one was passed over.
func TestRolledBackEventIsNotFannedOut(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
	e.startRouter(t)
	app := e.kafka.Client(t, kgo.TransactionalID("app"))
	ctx := context.Background()
	for _, tx := range []struct {
		id     string
		commit kgo.TransactionEndTry
	}{{"evt_rolled_back", kgo.TryAbort}, {"evt_committed", kgo.TryCommit}} {
		require.NoError(t, app.BeginTransaction())
		v := fmt.Sprintf(`{"id":%q,"account":"acct_1","type":"invoice.paid"}`, tx.id)
		require.NoError(t, app.ProduceSync(ctx, &kgo.Record{Topic: e.names.Events, Key: []byte("acct_1"), Value: []byte(v)}).FirstErr())
		require.NoError(t, app.EndTransaction(ctx, tx.commit))
	}
	seen := e.deliveryCounts(t, 1)
	require.Equal(t, map[string]int{delivery.ID("evt_committed", "ep_a"): 1}, seen)
}

// The dedupe state follows partitions across a rebalance: events fanned
// out by one router, repeated after a second router joined and took some
// of the partitions, are dropped by whichever owns them now (the newcomer
// read its partitions' state back from the changelog).
func TestRepeatedEventIsDroppedAfterRebalance(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const accounts, perAccount = 6, 5
	for a := range accounts {
		e.endpoint(t, fmt.Sprintf("ep_%d", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive)
	}
	cl := e.kafka.Client(t)
	produceAll := func() {
		t.Helper()
		for a := range accounts {
			for i := range perAccount {
				v := fmt.Sprintf(`{"id":"evt_%d_%d","account":"acct_%d","type":"invoice.paid"}`, a, i, a)
				require.NoError(t, cl.ProduceSync(context.Background(),
					&kgo.Record{Topic: e.names.Events, Key: fmt.Appendf(nil, "acct_%d", a), Value: []byte(v)}).FirstErr())
			}
		}
	}
	a := e.startInstance(t, router.Config{TransactionalID: "router-a"})
	produceAll()
	require.Len(t, e.deliveryCounts(t, accounts*perAccount), accounts*perAccount)

	b := e.startInstance(t, router.Config{TransactionalID: "router-b"})
	adm := kadm.NewClient(e.kafka.Client(t))
	wait.For(t, 30*time.Second, "both routers to own partitions", func() bool {
		groups, err := adm.DescribeGroups(context.Background(), "hookd-router")
		if err != nil {
			return false
		}
		g := groups["hookd-router"]
		owning := 0
		for _, m := range g.Members {
			if ca, ok := m.Assigned.AsConsumer(); ok && len(ca.Topics) > 0 && len(ca.Topics[0].Partitions) > 0 {
				owning++
			}
		}
		return g.State == "Stable" && owning == 2
	})
	produceAll()
	e.waitCommitted(t, 2*accounts*perAccount)
	seen := e.deliveryCounts(t, accounts*perAccount)
	require.Len(t, seen, accounts*perAccount)
	for id, n := range seen {
		require.Equal(t, 1, n, "delivery %s", id)
	}
	dropped := func(in *instance) float64 { return metrictest.Value(t, in.reg, "hookd_router_duplicate_events_total") }
	require.EqualValues(t, accounts*perAccount, dropped(a)+dropped(b))
	t.Logf("repeats dropped: %v by the first router, %v by the newcomer", dropped(a), dropped(b))
}

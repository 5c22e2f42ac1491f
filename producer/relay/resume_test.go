package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/producer/relay"
	"github.com/hookd/hookd/store"
)

// lazyConfig confirms as rarely as the relay allows (every 30s), so that
// the slot's confirmed position lags what was published by everything a
// test inserts: a restart from it republishes all of it unless the relay
// knows what is on the topic already.
func (e *env) lazyConfig() relay.Config {
	cfg := e.relayConfig()
	cfg.StatusInterval = 30 * time.Second
	cfg.RetryBackoff = 10 * time.Millisecond
	return cfg
}

// insertTxns commits n transactions of perTx outbox rows each, ids
// prefix_<i>, in the background; wait returns once they are committed.
func (e *env) insertTxns(t testing.TB, st *store.Store, prefix string, n, perTx int) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for lo := 0; lo < n*perTx; lo += perTx {
			_, err := st.Pool().Exec(context.Background(), `INSERT INTO webhooks.outbox (id, account, type)
				SELECT $3 || g, 'acct_' || (g % 7), 'invoice.paid' FROM generate_series($1::int, $2::int - 1) g`, lo, lo+perTx, prefix)
			if err != nil {
				t.Errorf("insert: %v", err)
				return
			}
		}
	})
	return wg.Wait
}

// terminateReplication ends the relay's replication connection from the
// server side, as a network cut or a walsender crash would: the relay's
// last confirmation never reaches the slot.
// The slot's walsender may be between two of the relay's connections (a
// terminated one gone, the next not yet there): it waits for one.
func terminateReplication(t testing.TB, st *store.Store, slot string) {
	t.Helper()
	waitFor(t, "a walsender of slot "+slot+" terminated", 30*time.Second, func() bool {
		var n int
		require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(active_pid))
			FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot).Scan(&n))
		require.LessOrEqual(t, n, 1, "one walsender per slot")
		return n == 1
	})
}

// requireOnce checks that ids prefix_0 .. prefix_<total-1> are each on the
// topic exactly once.
func requireOnce(t testing.TB, ids map[string]int, prefix string, total int) {
	t.Helper()
	dups, missing := 0, 0
	for i := range total {
		c := ids[fmt.Sprintf("%s%d", prefix, i)]
		if c == 0 {
			missing++
		}
		dups += max(c-1, 0)
	}
	require.Zero(t, missing, "%d of %d %s* events never published", missing, total, prefix)
	require.Zero(t, dups, "%d of %d %s* events published more than once", dups, total, prefix)
}

func countPrefix(ids map[string]int, prefix string) int {
	n := 0
	for id := range ids {
		if len(id) > len(prefix) && id[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// TestReplicationCutMidStreamPublishesOnce cuts the relay's replication
// connection three times while multi-row transactions stream: each time
// the relay resumes from a slot position that lags what it published (its
// confirmations are 30s apart), and every row still lands on the topic
// exactly once, including rows of a transaction cut half-way.
func TestReplicationCutMidStreamPublishesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	reg := prometheus.NewRegistry()
	start(t, e.newRelayWith(t, e.lazyConfig(), reg).Run)
	e.waitStreaming(t)

	const txns, perTx = 400, 10
	total := txns * perTx
	done := e.insertTxns(t, e.db.Store, "cut_", txns, perTx)
	for _, frac := range []int{4, 2} {
		waitFor(t, fmt.Sprintf("1/%d of the rows published", frac), 30*time.Second, func() bool {
			return countPrefix(events.eventIDs(t), "cut_") >= total/frac
		})
		terminateReplication(t, e.db.Store, e.slot)
		e.waitStreaming(t)
	}
	done()
	waitFor(t, "every row published", 30*time.Second, func() bool { return countPrefix(events.eventIDs(t), "cut_") == total })
	// After everything is published once, one more cut: the whole stream
	// since the slot's (lagging) position comes again and is skipped.
	terminateReplication(t, e.db.Store, e.slot)
	e.waitStreaming(t)
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	requireOnce(t, events.eventIDs(t), "cut_", total)
	require.Equal(t, 1, events.eventIDs(t)["barrier"])
	require.Greater(t, metric(t, reg, "hookd_relay_events_skipped_total", ""), 0.0, "the resumed stream skipped rows")
}

// TestRestartAfterCutPublishesOnce stops the relay after a cut (so that
// its final confirmation is lost) and starts a new one: nothing is
// published twice.
func TestRestartAfterCutPublishesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	cfg := e.lazyConfig()
	cfg.RetryBackoff = 20 * time.Second // the cut relay does not come back on its own
	stop := start(t, e.newRelay(t, cfg).Run)
	e.waitStreaming(t)
	const txns, perTx = 200, 5
	e.insertTxns(t, e.db.Store, "rs_", txns, perTx)()
	waitFor(t, "every row published", 30*time.Second, func() bool { return countPrefix(events.eventIDs(t), "rs_") == txns*perTx })
	terminateReplication(t, e.db.Store, e.slot)
	require.NoError(t, stop())

	start(t, e.newRelay(t, e.lazyConfig()).Run)
	e.waitStreaming(t)
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	requireOnce(t, events.eventIDs(t), "rs_", txns*perTx)
}

// TestFailoverAfterCrashPublishesOnce: relay A loses its replication and
// lock connections at once (a crashed host, as Postgres sees it); relay B
// takes over from the slot's lagging position and publishes nothing twice.
func TestFailoverAfterCrashPublishesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	cfgA := e.lazyConfig()
	cfgA.RetryBackoff = 20 * time.Second // A stays away once cut
	a, b := e.newRelay(t, cfgA), e.newRelay(t, e.lazyConfig())
	start(t, a.Run)
	waitFor(t, "relay A to lead", 10*time.Second, a.Leading)
	e.waitStreaming(t)
	start(t, b.Run)

	const txns, perTx = 300, 10
	total := txns * perTx
	done := e.insertTxns(t, e.db.Store, "fo_", txns, perTx)
	waitFor(t, "a third of the rows published", 30*time.Second, func() bool { return countPrefix(events.eventIDs(t), "fo_") >= total/3 })
	// Both of A's connections in one statement: A cannot confirm in
	// between.
	var n int
	require.NoError(t, e.db.Store.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM (
		SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		UNION SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL) p`, e.slot).Scan(&n))
	require.Equal(t, 2, n, "A's lock and replication connections terminated")
	waitFor(t, "relay B to take over", 20*time.Second, b.Leading)
	waitFor(t, "relay A to step down", 20*time.Second, func() bool { return !a.Leading() })
	done()
	waitFor(t, "every row published", 30*time.Second, func() bool { return countPrefix(events.eventIDs(t), "fo_") == total })
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	requireOnce(t, events.eventIDs(t), "fo_", total)
}

// TestPostgresCrashPublishesOnce crashes Postgres (pg_ctl stop -m
// immediate: no checkpoint) after the relay published and confirmed rows:
// on restart the slot's confirmed position is the one persisted at the
// last checkpoint, before those rows, and the relay skips them.
func TestPostgresCrashPublishesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg, err := pgcluster.Start(ctx, pgcluster.Config{})
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	st, err := store.Open(ctx, store.Config{DatabaseURL: pg.URL()}, e.logger)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx)
	require.NoError(t, err)

	events := collect(t, e.kafka, e.names.Events)
	cfg := e.relayConfig() // confirms every 100ms: the lag is Postgres's own
	cfg.RetryBackoff = 50 * time.Millisecond
	r, err := relay.New(cfg, relay.Deps{Store: st, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: e.logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	start(t, r.Run)
	slotAt := func() uint64 {
		lag, err := st.ReplicationSlotLag(ctx, e.slot)
		if err != nil {
			return 0
		}
		return lag.ConfirmedLSN
	}
	walAt := func() uint64 {
		var n int64
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n))
		return uint64(n)
	}
	waitFor(t, "the relay streaming", 30*time.Second, func() bool { return slotAt() > 0 })
	// A checkpoint, then the slot confirmed well past it: the slot's
	// position is on disk before the rows below. Postgres writes it again
	// only at the next checkpoint or when the slot's restart point moves
	// (a running-transactions record, every 15s when busy), so a crash
	// right after the rows rolls it back; if such a record came in
	// between, the test tries again with a new batch.
	const txns, perTx = 100, 10
	rolledBack := false
	for attempt := 0; attempt < 3 && !rolledBack; attempt++ {
		_, err = st.Pool().Exec(ctx, `CHECKPOINT`)
		require.NoError(t, err)
		settle := fmt.Sprintf("settle_%d", attempt)
		_, err = st.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type) VALUES ($1, 'acct_1', 'x')`, settle)
		require.NoError(t, err)
		at := walAt()
		waitFor(t, "the slot past the checkpoint", 30*time.Second, func() bool { return slotAt() >= at })

		prefix := fmt.Sprintf("pc%d_", attempt)
		e.insertTxns(t, st, prefix, txns, perTx)()
		end := walAt()
		waitFor(t, "every row published and confirmed", 30*time.Second, func() bool {
			return countPrefix(events.eventIDs(t), prefix) == txns*perTx && slotAt() >= end
		})
		require.NoError(t, pg.Stop(ctx, "immediate"))
		require.NoError(t, pg.Start(ctx))
		rolledBack = slotAt() < end
		t.Logf("attempt %d: the crash rolled the slot's position back %d bytes", attempt, int64(end)-int64(slotAt()))
	}
	require.True(t, rolledBack, "a crash rolled the slot's confirmed position back")

	waitFor(t, "the relay streaming again", 60*time.Second, func() bool {
		s, err := st.ReplicationSlot(ctx, e.slot)
		return err == nil && s.Active
	})
	_, err = st.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type) VALUES ('barrier', 'acct_1', 'x')`)
	require.NoError(t, err)
	waitFor(t, "the barrier row", 60*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	ids := events.eventIDs(t)
	for attempt := range 3 {
		if prefix := fmt.Sprintf("pc%d_", attempt); countPrefix(ids, prefix) > 0 {
			requireOnce(t, ids, prefix, txns*perTx)
		}
	}
	for id, n := range ids {
		require.Equal(t, 1, n, "event %s published %d times", id, n)
	}
}

// TestInterruptedBackfillPublishesOnce: the back-fill of a new slot fails
// half-way (a produce error); the relay re-creates the slot and back-fills
// again, skipping the rows the first attempt published.
func TestInterruptedBackfillPublishesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const rows = 3000
	e.insertTxns(t, e.db.Store, "bf_", rows/100, 100)()
	events := collect(t, e.kafka, e.names.Events)
	var produces atomic.Int64
	e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: kerr.UnknownServerError,
		When: func(kmsg.Request) bool { return produces.Add(1) == 6 }})
	cfg := e.relayConfig()
	cfg.RetryBackoff = 10 * time.Millisecond
	start(t, e.newRelayWith(t, cfg, prometheus.NewRegistry(), kgo.MaxBufferedRecords(100)).Run)
	e.waitStreaming(t)
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	require.GreaterOrEqual(t, produces.Load(), int64(6), "the fault fired")
	requireOnce(t, events.eventIDs(t), "bf_", rows)
}

// TestDirectProducerRecordsDoNotStopTheScan: records other producers
// write to the events topic (no relay headers; here 3000, more than the
// first scan windows) sit between the relay's records and the end of
// the topic; a resumed stream still finds the relay's rows behind them
// and skips them, and the direct records are left alone.
func TestDirectProducerRecordsDoNotStopTheScan(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	start(t, e.newRelay(t, e.lazyConfig()).Run)
	e.waitStreaming(t)
	e.insertTxns(t, e.db.Store, "dp_", 40, 5)()
	waitFor(t, "the relay's rows", 20*time.Second, func() bool { return countPrefix(events.eventIDs(t), "dp_") == 200 })

	cl := e.kafka.Client(t)
	var recs []*kgo.Record
	for i := range 3000 {
		recs = append(recs, &kgo.Record{Topic: e.names.Events, Key: []byte(fmt.Sprintf("acct_%d", i%7)),
			Value: fmt.Appendf(nil, `{"id":"direct_%d","account":"acct_%d","type":"t.x","data":{}}`, i, i%7)})
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	terminateReplication(t, e.db.Store, e.slot)
	e.waitStreaming(t)
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	requireOnce(t, events.eventIDs(t), "dp_", 200)
	requireOnce(t, events.eventIDs(t), "direct_", 3000)
}

// TestRelayPublishStage: every streamed row is observed once in
// hookd_stage_latency_seconds{stage="relay_publish"}, from its commit to
// Kafka's ack, and once in stage="relay_receive", from its commit to the
// relay reading it, a part of the first.
func TestRelayPublishStage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	reg := prometheus.NewRegistry()
	start(t, e.newRelayWith(t, e.relayConfig(), reg).Run)
	e.waitStreaming(t)
	e.insertTxns(t, e.db.Store, "sg_", 10, 3)()
	waitFor(t, "every row", 20*time.Second, func() bool { return countPrefix(events.eventIDs(t), "sg_") == 30 })
	waitFor(t, "30 relay_publish observations", 10*time.Second, func() bool {
		n, _ := stageObservations(t, reg, "relay_publish")
		return n == 30
	})
	n, sum := stageObservations(t, reg, "relay_publish")
	require.Equal(t, uint64(30), n)
	require.Greater(t, sum, 0.0)
	require.Less(t, sum/float64(n), 10.0, "commit to ack takes seconds at most here")
	rn, rsum := stageObservations(t, reg, "relay_receive")
	require.Equal(t, uint64(30), rn, "relay_receive: one observation per row")
	require.LessOrEqual(t, rsum, sum, "relay_receive is a part of relay_publish")
}

// stageObservations reads the count and sum of one stage's histogram.
func stageObservations(t testing.TB, reg *prometheus.Registry, stage string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "hookd_stage_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

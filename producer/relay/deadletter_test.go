package relay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/producer/relay"
)

// bigRowSQL is the repro: a 2 MiB payload.
const bigRowSQL = `INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ($1, 'acctA', 'inv.paid', jsonb_build_object('x', repeat('a', 2*1024*1024)))`

// insertBypassing commits rows in one transaction that skips the outbox's
// size trigger (session_replication_role = replica, as a replication apply
// worker or a restore would), e.g. a row inserted before migration 00006.
func (e *env) insertBypassing(t testing.TB, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.db.Store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	for _, s := range stmts {
		_, err = tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	require.NoError(t, tx.Commit(ctx))
}

// walPosition is the server's current WAL position, as a number.
func (e *env) walPosition(t testing.TB) uint64 {
	t.Helper()
	var n int64
	require.NoError(t, e.db.Store.Pool().QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n))
	return uint64(n)
}

func (e *env) newRelayWith(t testing.TB, cfg relay.Config, reg prometheus.Registerer, opts ...kgo.Opt) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg, relay.Deps{Store: e.db.Store, KafkaOpts: append([]kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, opts...),
		Logger: e.logger, Registerer: reg})
	require.NoError(t, err)
	return r
}

// metric reads a counter or gauge (the child with label value, if given).
func metric(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

// dead collects the DLQ's summary records by outbox id.
func (c *collector) dead(t testing.TB) map[string][]*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*kgo.Record{}
	for _, r := range c.recs {
		for _, h := range r.Headers {
			if h.Key == deadletter.HeaderOutboxID {
				out[string(h.Value)] = append(out[string(h.Value)], r)
			}
		}
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestOversizeRowIsDeadLetteredAndTheSlotMovesOn is issue 11's repro: a
// 2 MiB outbox row, then normal rows. The database refuses the row at
// insert; one that bypassed the check (and one committed before the relay
// ever ran, published by the back-fill) is dead-lettered as oversize with
// its outbox id, without its payload; every normal row is published exactly
// once, the stream never restarts, and the slot's confirmed position moves
// past it.
func TestOversizeRowIsDeadLetteredAndTheSlotMovesOn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	events := collect(t, e.kafka, e.names.Events)
	dlq := collect(t, e.kafka, e.names.DLQ)

	// At insert: the application's transaction gets the error.
	_, err := e.db.Store.Pool().Exec(ctx, bigRowSQL, "refused")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code)

	// Committed before the relay ever ran: the back-fill meets it.
	e.insert(t, "pre_ok", "acctA", "inv.paid", true)
	e.insertBypassing(t, `INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('pre_big', 'acctA', 'inv.paid', jsonb_build_object('x', repeat('a', 2*1024*1024)))`)

	reg := prometheus.NewRegistry()
	rl := e.newRelayWith(t, e.relayConfig(), reg)
	stop := start(t, rl.Run)
	e.waitStreaming(t)

	want := map[string]bool{"pre_ok": true}
	for i := range 5 {
		id := fmt.Sprintf("before_%d", i)
		e.insert(t, id, "acctA", "inv.paid", true)
		want[id] = true
	}
	// The repro row alone, then one sharing its transaction with a normal
	// row.
	e.insertBypassing(t, `INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('big_1', 'acctA', 'inv.paid', jsonb_build_object('x', repeat('a', 2*1024*1024)))`)
	e.insertBypassing(t, `INSERT INTO webhooks.outbox (id, account, type) VALUES ('mixed_ok', 'acctA', 'inv.paid')`,
		`INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('big_2', 'acctB', 'inv.void', jsonb_build_object('x', repeat('b', 300*1024)))`)
	want["mixed_ok"] = true
	for i := range 20 {
		id := fmt.Sprintf("after_%d", i)
		e.insert(t, id, "acctA", "inv.paid", true)
		want[id] = true
	}
	end := e.walPosition(t)

	waitFor(t, "every normal row published and three rows dead-lettered", 30*time.Second, func() bool {
		return len(events.eventIDs(t)) >= len(want) && len(dlq.dead(t)) >= 3
	})
	waitFor(t, "the slot's confirmed position past every insert", 20*time.Second, func() bool {
		lag, err := e.db.Store.ReplicationSlotLag(ctx, e.slot)
		return err == nil && lag.ConfirmedLSN >= end
	})

	got := events.eventIDs(t)
	for id, n := range got {
		require.True(t, want[id], "unexpected event %s on the events topic", id)
		require.Equal(t, 1, n, "event %s published %d times", id, n)
	}
	require.Len(t, got, len(want))

	dead := dlq.dead(t)
	require.Len(t, dead, 3)
	// The envelope: the payload and about 100 bytes of the rest.
	for id, payload := range map[string]int{"pre_big": 2 << 20, "big_1": 2 << 20, "big_2": 300 << 10} {
		require.Len(t, dead[id], 1, "%s dead-lettered once", id)
		r := dead[id][0]
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.ReasonOversize, p.Reason)
		require.Equal(t, "oversize", p.ErrorClass)
		require.False(t, p.DeadAt.IsZero())
		s, err := deadletter.ReadSummary(r)
		require.NoError(t, err)
		require.Equal(t, id, s.OutboxID)
		require.Equal(t, id, s.EventID)
		require.Greater(t, s.Size, payload)
		require.Less(t, s.Size, payload+300)
		require.Equal(t, 256<<10, s.Limit)
		require.Equal(t, strconv.Itoa(s.Size), header(r, deadletter.HeaderSize))
		require.Equal(t, id, header(r, deadletter.HeaderOutboxID))
		require.Equal(t, "outbox", header(r, relay.HeaderSource))
		require.Less(t, len(r.Value), 1024, "the dead letter does not carry the payload")
		require.Equal(t, s.Account, string(r.Key))
	}
	s, _ := deadletter.ReadSummary(dead["big_2"][0])
	require.Equal(t, "acctB", s.Account)
	require.Equal(t, "inv.void", s.EventType)

	require.Equal(t, 0.0, metric(t, reg, "hookd_relay_stream_failures_total", ""), "the stream never restarted")
	require.Equal(t, 3.0, metric(t, reg, "hookd_relay_events_dead_lettered_total", deadletter.ReasonOversize))
	require.Equal(t, 0.0, metric(t, reg, "hookd_relay_events_dead_lettered_total", deadletter.ReasonUnpublishable))
	require.Equal(t, float64(len(want)), metric(t, reg, "hookd_relay_events_published_total", "")+metric(t, reg, "hookd_relay_events_backfilled_total", ""))

	// A new relay resumes past them: nothing is published again. The
	// barrier row comes after everything in the WAL.
	require.NoError(t, stop())
	start(t, e.newRelay(t, e.relayConfig()).Run)
	e.insert(t, "barrier", "acctA", "inv.paid", true)
	waitFor(t, "the barrier row", 20*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	require.Len(t, events.eventIDs(t), len(want)+1, "nothing re-published after a restart")
	for id, n := range events.eventIDs(t) {
		require.Equal(t, 1, n, "event %s published %d times", id, n)
	}
	require.Len(t, dlq.dead(t), 3)
}

// TestRefusedRecordIsRetriedAloneThenDeadLettered: a record the broker
// refuses for what it is (INVALID_RECORD here, injected by kfake for every
// batch holding it; MESSAGE_TOO_LARGE from a topic limit below) fails its
// whole batch; the relay retries each refused record alone, publishes the
// ones that were only in bad company, and dead-letters the culprit as
// unpublishable. Nothing is published twice and the stream never
// restarts.
func TestRefusedRecordIsRetriedAloneThenDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, class string
		arrange     func(t *testing.T, e *env, marker []byte)
		poison      func(marker []byte) string
	}{
		{
			name: "invalid_record", class: "INVALID_RECORD",
			arrange: func(t *testing.T, e *env, marker []byte) {
				e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: kerr.InvalidRecord, Count: -1,
					When: func(req kmsg.Request) bool { return produceHolds(req, marker) }})
			},
			poison: func(marker []byte) string {
				return fmt.Sprintf(`INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('poison', 'acctA', 'inv.paid', jsonb_build_object('m', '%s'))`, marker)
			},
		},
		{
			name: "message_too_large", class: "MESSAGE_TOO_LARGE",
			arrange: func(t *testing.T, e *env, _ []byte) {
				adm := kadm.NewClient(e.kafka.Client(t))
				_, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("8192")}}, e.names.Events)
				require.NoError(t, err)
			},
			poison: func([]byte) string {
				return `INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('poison', 'acctA', 'inv.paid', jsonb_build_object('x', repeat('p', 20000)))`
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var b [8]byte
			_, _ = rand.Read(b[:])
			marker := []byte("poison-" + hex.EncodeToString(b[:]))
			tc.arrange(t, e, marker)
			events := collect(t, e.kafka, e.names.Events)
			dlq := collect(t, e.kafka, e.names.DLQ)
			reg := prometheus.NewRegistry()
			// Uncompressed, so that the batches' sizes and bytes are the
			// rows'.
			start(t, e.newRelayWith(t, e.relayConfig(), reg, kgo.ProducerBatchCompression(kgo.NoCompression())).Run)
			e.waitStreaming(t)

			// The culprit shares its transaction (and so its batches) with
			// normal rows, whose batch alone also exceeds 8 KiB.
			stmts := []string{}
			want := map[string]bool{}
			for i := range 40 {
				id := fmt.Sprintf("ok_%d", i)
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('%s', 'acctA', 'inv.paid', jsonb_build_object('pad', repeat('o', 300)))`, id))
				want[id] = true
				if i == 20 {
					stmts = append(stmts, tc.poison(marker))
				}
			}
			e.insertBypassing(t, stmts...)
			e.insert(t, "after", "acctA", "inv.paid", true)
			want["after"] = true
			end := e.walPosition(t)

			waitFor(t, "every normal row published and the culprit dead-lettered", 30*time.Second, func() bool {
				return len(events.eventIDs(t)) >= len(want) && len(dlq.dead(t)) >= 1
			})
			waitFor(t, "the slot's confirmed position past every insert", 20*time.Second, func() bool {
				lag, err := e.db.Store.ReplicationSlotLag(context.Background(), e.slot)
				return err == nil && lag.ConfirmedLSN >= end
			})
			got := events.eventIDs(t)
			for id, n := range got {
				require.True(t, want[id], "unexpected event %s", id)
				require.Equal(t, 1, n, "event %s published %d times", id, n)
			}
			require.Len(t, got, len(want))
			dead := dlq.dead(t)
			require.Len(t, dead, 1)
			require.Len(t, dead["poison"], 1)
			p, err := deadletter.Read(dead["poison"][0])
			require.NoError(t, err)
			require.Equal(t, deadletter.ReasonUnpublishable, p.Reason)
			require.Equal(t, tc.class, p.ErrorClass)
			s, err := deadletter.ReadSummary(dead["poison"][0])
			require.NoError(t, err)
			require.Equal(t, "poison", s.OutboxID)
			require.Contains(t, s.Detail, tc.class)
			require.Equal(t, 0.0, metric(t, reg, "hookd_relay_stream_failures_total", ""))
			require.Equal(t, 1.0, metric(t, reg, "hookd_relay_events_dead_lettered_total", deadletter.ReasonUnpublishable))
		})
	}
}

// produceHolds reports whether a produce request carries marker in one of
// its (uncompressed) batches.
func produceHolds(req kmsg.Request, marker []byte) bool {
	pr, ok := req.(*kmsg.ProduceRequest)
	if !ok {
		return false
	}
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			if bytes.Contains(p.Records, marker) {
				return true
			}
		}
	}
	return false
}

// TestTopicWideProduceErrorIsRetriedNotDeadLettered: an error that would
// refuse every row alike (here UNKNOWN_SERVER_ERROR for a while; the
// client does not retry it) restarts the stream as before; nothing is
// dead-lettered and every row is published once the broker accepts again.
func TestTopicWideProduceErrorIsRetriedNotDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	dlq := collect(t, e.kafka, e.names.DLQ)
	reg := prometheus.NewRegistry()
	cfg := e.relayConfig()
	cfg.RetryBackoff = 10 * time.Millisecond
	start(t, e.newRelayWith(t, cfg, reg).Run)
	e.waitStreaming(t)
	e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: kerr.UnknownServerError, Count: 3})
	for i := range 10 {
		e.insert(t, fmt.Sprintf("t_%d", i), "acctA", "inv.paid", true)
	}
	waitFor(t, "every row published after the refusals", 30*time.Second, func() bool { return len(events.eventIDs(t)) == 10 })
	requireOnce(t, events.eventIDs(t), "t_", 10)
	require.GreaterOrEqual(t, metric(t, reg, "hookd_relay_stream_failures_total", ""), 1.0, "the stream restarted")
	require.Empty(t, dlq.dead(t), "nothing dead-lettered for a topic-wide error")
	require.Equal(t, 0.0, metric(t, reg, "hookd_relay_events_dead_lettered_total", deadletter.ReasonUnpublishable))
}

func TestConfigValidatesEnvelopeLimitAndDLQ(t *testing.T) {
	t.Parallel()
	db := setup(t).db
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{MaxEnvelopeBytes: 100}, "relay max envelope bytes: must be between 1024 and 983040, got 100"},
		{relay.Config{MaxEnvelopeBytes: 1 << 20}, "relay max envelope bytes: must be between 1024 and 983040, got 1048576"},
		{relay.Config{EventsTopic: "x.events", DLQTopic: "x.events"}, `relay dlq topic: must differ from the events topic "x.events"`},
	} {
		_, err := relay.New(tc.cfg, relay.Deps{Store: db.Store})
		require.EqualError(t, err, tc.want)
	}
	_, err := relay.New(relay.Config{MaxEnvelopeBytes: 960 << 10}, relay.Deps{Store: db.Store})
	require.NoError(t, err)
}

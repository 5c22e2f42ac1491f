package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

	"github.com/hookd/hookd/producer/relay"
)

// logRecorder is a slog.Handler that keeps the records at or above a
// level (and passes every record on to next).
type logRecorder struct {
	next  slog.Handler
	mu    *sync.Mutex
	lines *[]string
}

func newLogRecorder(next slog.Handler) *logRecorder {
	return &logRecorder{next: next, mu: &sync.Mutex{}, lines: new([]string)}
}

func (h *logRecorder) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *logRecorder) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// at returns the lines logged at level.
func (h *logRecorder) at(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range *h.lines {
		if strings.HasPrefix(l, level.String()+" ") {
			out = append(out, l)
		}
	}
	return out
}

func (e *env) newRelayLogged(t testing.TB, cfg relay.Config, reg prometheus.Registerer, opts ...kgo.Opt) (*relay.Relay, *logRecorder) {
	t.Helper()
	rec := newLogRecorder(e.logger.Handler())
	r, err := relay.New(cfg, relay.Deps{Store: e.db.Store, KafkaOpts: append([]kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, opts...),
		Logger: slog.New(rec), Registerer: reg})
	require.NoError(t, err)
	return r, rec
}

// slotConfirmed is the slot's confirmed position as a number.
func (e *env) slotConfirmed(t testing.TB) uint64 {
	t.Helper()
	lag, err := e.db.Store.ReplicationSlotLag(context.Background(), e.slot)
	require.NoError(t, err)
	return lag.ConfirmedLSN
}

// TestProduceErrorsMidBatch injects retriable produce errors into the
// events topic's partitions while multi-row transactions stream:
// NOT_LEADER_FOR_PARTITION (refused, then retried by the client) and
// REQUEST_TIMED_OUT (a real broker may have written the batch; kfake does,
// and the retry must not write it twice). Nothing is lost, nothing is
// duplicated, the stream never restarts and the slot moves past every row.
func TestProduceErrorsMidBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  *kerr.Error
	}{
		{"not_leader", kerr.NotLeaderForPartition},
		{"request_timed_out", kerr.RequestTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			events := collect(t, e.kafka, e.names.Events)
			reg := prometheus.NewRegistry()
			r := e.newRelayWith(t, e.relayConfig(), reg)
			start(t, r.Run)
			e.waitStreaming(t)

			const txns, perTx = 200, 5
			done := e.insertTxns(t, e.db.Store, "pe_", txns, perTx)
			waitFor(t, "the stream under way", 20*time.Second, func() bool { return countPrefix(events.eventIDs(t), "pe_") >= 50 })
			// Three requests, mid-stream. (After NOT_LEADER the client
			// retries once its metadata is refreshed, up to
			// MetadataMinAge, 5s, later.)
			h := e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: tc.err, Count: 3})
			done()
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			require.NoError(t, h.Wait(ctx, 3), "the faults fired")
			end := e.walPosition(t)
			waitFor(t, "every row published and the slot past them", 30*time.Second, func() bool {
				return countPrefix(events.eventIDs(t), "pe_") == txns*perTx && e.slotConfirmed(t) >= end
			})
			requireOnce(t, events.eventIDs(t), "pe_", txns*perTx)
			require.True(t, r.Leading(), "the relay still streams")
			require.Equal(t, 0.0, metric(t, reg, "hookd_relay_stream_failures_total", ""), "the stream never restarted")
		})
	}
}

// brokerDown makes the kfake broker close every connection's request
// while down holds: to its clients Kafka is unreachable.
func brokerDown(c *kfake.Cluster, down *atomic.Bool) {
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("broker down (test)"), true
	})
}

// walsenderReplyTime is when the relay last reported its position to
// Postgres (pg_stat_replication.reply_time of the slot's walsender).
func (e *env) walsenderReplyTime(t testing.TB) time.Time {
	t.Helper()
	var at time.Time
	err := e.db.Store.Pool().QueryRow(context.Background(), `SELECT coalesce(r.reply_time, 'epoch') FROM pg_stat_replication r
		JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, e.slot).Scan(&at)
	if err != nil {
		return time.Time{}
	}
	return at
}

// TestKafkaOutageIsWaitedOut takes the broker away for longer than the
// relay's buffer lasts (more rows are committed than it may hold
// unacknowledged) and its drain timeout: the relay keeps its replication
// session (it still answers Postgres), logs one WARN for the outage and
// shows it in hookd_relay_stalled, does not return from Run, and once the
// broker is back publishes every row exactly once and confirms them.
func TestKafkaOutageIsWaitedOut(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	reg := prometheus.NewRegistry()
	cfg := e.relayConfig()
	cfg.StallAfter = 300 * time.Millisecond
	cfg.DrainTimeout = time.Second
	cfg.RetryBackoff = 10 * time.Millisecond
	r, logs := e.newRelayLogged(t, cfg, reg, kgo.MaxBufferedRecords(20))
	stop := start(t, r.Run)
	e.waitStreaming(t)
	e.insertTxns(t, e.db.Store, "pre_", 10, 5)()
	waitFor(t, "rows before the outage", 20*time.Second, func() bool { return countPrefix(events.eventIDs(t), "pre_") == 50 })
	require.Empty(t, logs.at(slog.LevelWarn))

	var down atomic.Bool
	down.Store(true)
	brokerDown(e.kafka.Cluster, &down)
	e.insertTxns(t, e.db.Store, "out_", 40, 5)() // 200 rows, the buffer holds 20
	waitFor(t, "the relay to report the outage", 20*time.Second, func() bool {
		return metric(t, reg, "hookd_relay_stalled", "") == 1
	})
	// The outage outlasts the drain timeout and many status intervals; the
	// relay keeps reporting to Postgres throughout.
	reply := e.walsenderReplyTime(t)
	waitFor(t, "the relay to answer Postgres during the outage", 20*time.Second, func() bool {
		return e.walsenderReplyTime(t).After(reply.Add(2 * time.Second))
	})
	require.True(t, r.Leading(), "the relay still leads during the outage")
	down.Store(false)

	end := e.walPosition(t)
	waitFor(t, "every row published after the outage and confirmed", 60*time.Second, func() bool {
		return countPrefix(events.eventIDs(t), "out_") == 200 && e.slotConfirmed(t) >= end
	})
	waitFor(t, "the outage to be over", 10*time.Second, func() bool { return metric(t, reg, "hookd_relay_stalled", "") == 0 })
	requireOnce(t, events.eventIDs(t), "out_", 200)
	requireOnce(t, events.eventIDs(t), "pre_", 50)
	warns := logs.at(slog.LevelWarn)
	require.Len(t, warns, 1, "one WARN for the outage: %q", warns)
	require.Contains(t, warns[0], "Kafka")
	require.NoError(t, stop(), "Run returned nil only when stopped")
}

// TestKafkaOutageAtStartIsWaitedOut: a leader that starts while the broker
// is unreachable retries with backoff (one WARN), and streams once it is
// back.
func TestKafkaOutageAtStartIsWaitedOut(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	var down atomic.Bool
	down.Store(true)
	brokerDown(e.kafka.Cluster, &down)
	e.insertTxns(t, e.db.Store, "st_", 10, 5)()
	reg := prometheus.NewRegistry()
	cfg := e.relayConfig()
	cfg.RetryBackoff = 10 * time.Millisecond
	r, logs := e.newRelayLogged(t, cfg, reg)
	stop := start(t, r.Run)
	waitFor(t, "failed attempts", 60*time.Second, func() bool { return metric(t, reg, "hookd_relay_stream_failures_total", "") >= 2 })
	down.Store(false)
	e.waitStreaming(t)
	waitFor(t, "every row", 30*time.Second, func() bool { return countPrefix(events.eventIDs(t), "st_") == 50 })
	requireOnce(t, events.eventIDs(t), "st_", 50)
	warns := logs.at(slog.LevelWarn)
	require.Len(t, warns, 1, "one WARN for the outage: %q", warns)
	require.NoError(t, stop())
}

// TestAuthorizationFailureEndsRun: Kafka refusing the relay's writes for
// lack of authorization is not an outage to wait out: Run returns one
// line naming it, and nothing is dead-lettered.
func TestAuthorizationFailureEndsRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dlq := collect(t, e.kafka, e.names.DLQ)
	cfg := e.relayConfig()
	cfg.RetryBackoff = 10 * time.Millisecond
	r := e.newRelay(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	e.waitStreaming(t)
	e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: kerr.TopicAuthorizationFailed, Count: -1})
	e.insert(t, "denied", "acct_1", "invoice.paid", true)
	err := <-errc
	require.NoError(t, ctx.Err(), "Run returned on its own")
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	require.NotContains(t, err.Error(), "\n")
	require.Empty(t, dlq.dead(t))
}

// TestStopDuringKafkaOutage stops the relay while the broker is away and
// more rows wait than its buffer holds: Run returns nil within the drain
// timeout instead of hanging on a blocked produce, and a relay started
// once the broker is back publishes every row exactly once.
func TestStopDuringKafkaOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	reg := prometheus.NewRegistry()
	cfg := e.relayConfig()
	cfg.StallAfter = 200 * time.Millisecond
	cfg.DrainTimeout = time.Second
	stop := start(t, e.newRelayWith(t, cfg, reg, kgo.MaxBufferedRecords(20)).Run)
	e.waitStreaming(t)
	e.insertTxns(t, e.db.Store, "sd_", 5, 5)()
	waitFor(t, "rows before the outage", 20*time.Second, func() bool { return countPrefix(events.eventIDs(t), "sd_") == 25 })

	var down atomic.Bool
	down.Store(true)
	brokerDown(e.kafka.Cluster, &down)
	e.insertTxns(t, e.db.Store, "so_", 20, 5)() // 100 rows, the buffer holds 20
	waitFor(t, "the relay to report the outage", 20*time.Second, func() bool { return metric(t, reg, "hookd_relay_stalled", "") == 1 })
	stopped := time.Now()
	require.NoError(t, stop())
	t.Logf("Run returned %s after cancel during the outage", time.Since(stopped).Round(time.Millisecond))
	down.Store(false)

	start(t, e.newRelay(t, e.relayConfig()).Run)
	e.insert(t, "barrier", "acct_1", "invoice.paid", true)
	waitFor(t, "the barrier row", 30*time.Second, func() bool { return events.eventIDs(t)["barrier"] == 1 })
	requireOnce(t, events.eventIDs(t), "sd_", 25)
	requireOnce(t, events.eventIDs(t), "so_", 100)
}

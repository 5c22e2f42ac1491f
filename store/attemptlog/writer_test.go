package attemptlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store/attemptlog"
	"github.com/hookd/hookd/store/maintenance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

type bundle struct {
	db       *pgtest.DB
	kafka    *kafkatest.Cluster
	producer *kgo.Client
	names    topics.Names
	reg      *prometheus.Registry
	clock    *fakeclock.Clock
	logger   *slog.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	tcfg := topics.Config{Partitions: 3}
	b := &bundle{
		db:     pgtest.New(t),
		kafka:  kafkatest.NewProvisioned(t, tcfg),
		names:  topics.NamesFor(tcfg),
		reg:    prometheus.NewRegistry(),
		clock:  fakeclock.New(t0),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if testing.Verbose() {
		b.logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	b.producer = b.kafka.Client(t)
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// startWriter runs a writer until the test ends (or stop is called) and
// fails the test if Run returns an error.
func (b *bundle) startWriter(t *testing.T, cfg attemptlog.Config, reg *prometheus.Registry) (stop func()) {
	t.Helper()
	cfg.Topic, cfg.DeliveriesTopic, cfg.OpsTopic, cfg.EventsTopic = b.names.Attempts, b.names.Deliveries, b.names.Ops, b.names.Events
	if cfg.RetryMax == 0 {
		cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	}
	w, err := attemptlog.New(cfg, attemptlog.Deps{
		Store: b.db.Store, Logger: b.logger, Registerer: reg, Clock: b.clock,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(b.kafka.Addrs...), kgo.FetchMaxWait(200 * time.Millisecond)},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Fatal("writer did not stop within 20s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (b *bundle) produce(t *testing.T, recs ...*attempt.Record) {
	t.Helper()
	krs := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		kr, err := r.KafkaRecord(b.names.Attempts)
		require.NoError(t, err)
		krs = append(krs, kr)
	}
	b.produceRecords(t, krs...)
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, within, what, cond)
}

func (b *bundle) queryInt(t *testing.T, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	require.NoError(t, b.db.Store.Pool().QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

func (b *bundle) addEndpoint(t *testing.T, id string) {
	t.Helper()
	_, err := b.db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.endpoints (id, account, url, secrets)
		VALUES ($1, 'acct_1', 'https://example.com/hook', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, id)
	require.NoError(t, err)
}

// history is the attempts of n deliveries to ep: delivery i fails i%4
// times, then is delivered, except every fifth which is dead-lettered.
func history(prefix, ep string, n int) []*attempt.Record {
	var out []*attempt.Record
	for i := range n {
		d := fmt.Sprintf("%s-d%03d", prefix, i)
		fails := i % 4
		for a := 1; a <= fails+1; a++ {
			r := &attempt.Record{
				AttemptID: fmt.Sprintf("%s-a%d", d, a), DeliveryID: d, EventID: "evt-" + d, EventType: "invoice.paid",
				EndpointID: ep, Account: "acct_1", EventCreated: t0, Attempt: a, Tier: "webhooks.deliveries",
				StartedAt: t0.Add(time.Duration(i)*time.Second + time.Duration(a)*time.Minute), Duration: 30 * time.Millisecond,
			}
			switch {
			case a <= fails:
				r.Outcome, r.StatusCode, r.ErrorClass, r.NextAction = attempt.OutcomeRetry, 503, "http_5xx", attempt.NextRetry
				r.NextDueAt = r.StartedAt.Add(30 * time.Second)
			case i%5 == 4:
				r.Outcome, r.StatusCode, r.ErrorClass, r.NextAction = attempt.OutcomePermanent, 404, "http_4xx", attempt.NextDeadLetter
				r.DLQ, r.DeadReason = &attempt.Position{Topic: "webhooks.dlq", Partition: 1, Offset: int64(i)}, "client_error"
			default:
				r.Outcome, r.StatusCode, r.NextAction = attempt.OutcomeDelivered, 200, attempt.NextDone
			}
			out = append(out, r)
		}
	}
	return out
}

func TestWriterBatchesIdempotentlyAndTracksState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := history("x", "ep1", 60) // 150 records
	total := len(recs)
	b.produce(t, recs[:70]...)
	// A record that is not an attempt is logged, counted and passed over.
	require.NoError(t, b.producer.ProduceSync(context.Background(),
		&kgo.Record{Topic: b.names.Attempts, Key: []byte("junk"), Value: []byte(`{"attempt_id": 7`)}).FirstErr())
	// An intent record is passed over unread: not counted invalid.
	require.NoError(t, b.producer.ProduceSync(context.Background(),
		&kgo.Record{Topic: b.names.Attempts, Key: []byte("intent"), Value: []byte(`not an attempt`),
			Headers: []kgo.RecordHeader{{Key: attempt.IntentHeader}}}).FirstErr())
	b.produce(t, recs[70:]...)
	b.startWriter(t, attemptlog.Config{MaxBatch: 40}, b.reg)

	eventually(t, 20*time.Second, "every attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == total
	})
	require.GreaterOrEqual(t, metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total"), float64(total/40))
	require.Equal(t, 60, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries`))
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "invalid"))
	require.Equal(t, 12, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'dead' AND dlq_offset IS NOT NULL AND dead_reason = 'client_error'`))
	require.Equal(t, 48, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'`))
	// Delivery 3 failed three times, then was delivered at attempt 4.
	require.Equal(t, 4, b.queryInt(t, `SELECT attempts FROM webhooks.deliveries WHERE id = 'x-d003'`))

	// The same records again, and a late, older attempt: nothing changes but
	// x-d001's count of attempts logged (2, now 3: the late one is in its log).
	before := b.snapshot(t)
	require.True(t, strings.HasPrefix(before[1], "x-d001|delivered|2|"), before[1])
	before[1] = strings.Replace(before[1], "|2|", "|3|", 1)
	late := *recs[1]
	late.AttemptID, late.Outcome, late.NextAction, late.NextDueAt = "x-d001-stale", attempt.OutcomeRetry, attempt.NextRetry, t0.Add(time.Hour)
	late.StartedAt = late.StartedAt.Add(-time.Second)
	b.produce(t, recs...)
	b.produce(t, &late)
	eventually(t, 20*time.Second, "the duplicates consumed", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "duplicate") == float64(total) &&
			metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "inserted") == float64(total+1)
	})
	require.Equal(t, total+1, b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`))
	require.Equal(t, 0, b.queryInt(t, `SELECT count(*) FROM (SELECT attempt_id FROM webhooks.attempts GROUP BY 1 HAVING count(*) > 1) dup`))
	require.Equal(t, before, b.snapshot(t), "delivery rows changed by duplicates or a stale attempt")

	// Metrics count each attempt once.
	require.Equal(t, 12.0, metrictest.Value(t, b.reg, "hookd_dlq_records_total", "client_error"))
	require.Equal(t, 46.0, metrictest.Value(t, b.reg, "hookd_attempts_total", "1", "retry"), "45 first attempts failed, plus the stale one")
	require.Equal(t, 12.0, metrictest.Value(t, b.reg, "hookd_attempts_total", "1", "delivered"))
	require.Equal(t, 3.0, metrictest.Value(t, b.reg, "hookd_attempts_total", "1", "permanent"))
}

// snapshot renders every delivery row, for before/after comparisons.
// An attempt whose outcome is unknown (a request the dispatcher died
// during) is a row of its own, made (counted in the delivery's attempts),
// and the delivery stays retrying until its next attempt.
func TestWriterStoresUnknownOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addEndpoint(t, "ep1")
	recs := history("u", "ep1", 1) // delivered at attempt 1
	unknown := *recs[0]
	unknown.AttemptID, unknown.Outcome, unknown.NextAction, unknown.StatusCode = "u-unknown", attempt.OutcomeUnknown, attempt.NextRetry, 0
	unknown.Error, unknown.StartedAt = attempt.ErrorUnknown, recs[0].StartedAt.Add(-time.Second)
	unknown.Source = &attempt.Position{Topic: b.names.Deliveries, Partition: 0, Offset: 3}
	b.produce(t, &unknown)
	b.startWriter(t, attemptlog.Config{}, b.reg)
	eventually(t, 20*time.Second, "the unknown attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'u-d000' AND status = 'retrying'`) == 1
	})
	b.produce(t, recs[0])
	eventually(t, 20*time.Second, "the delivery delivered", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'u-d000' AND status = 'delivered' AND attempts = 2`) == 1
	})
	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE outcome = 'unknown' AND error = $1`, attempt.ErrorUnknown))
}

func (b *bundle) snapshot(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Store.Pool().Query(context.Background(), `SELECT concat_ws('|', id, status, attempts,
		last_status_code, next_due_at, dead_reason, dlq_offset, delivered_at, last_attempt_at) FROM webhooks.deliveries ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestWriterWritesPendingRowsFromDeliveries: every record on the deliveries
// topic gets its pending row (the router never writes Postgres), a row an
// attempt moved on is never put back to pending, and reading the topic again
// changes nothing.
func TestWriterWritesPendingRowsFromDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var recs []*kgo.Record
	for i := range 5 {
		d := delivery.Delivery{ID: fmt.Sprintf("p-d%03d", i), EventID: fmt.Sprintf("evt-p-%d", i), EventType: "invoice.paid",
			EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Body: []byte(`{}`)}
		recs = append(recs, d.Record(b.names.Deliveries))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.producer.ProduceSync(ctx, recs...).FirstErr())
	done := &attempt.Record{AttemptID: "p-d000-a1", DeliveryID: "p-d000", EventID: "evt-p-0", EventType: "invoice.paid",
		EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Tier: b.names.Deliveries,
		StartedAt: t0.Add(time.Second), Duration: time.Millisecond, Outcome: attempt.OutcomeDelivered, StatusCode: 200, NextAction: attempt.NextDone}
	b.produce(t, done)

	stop := b.startWriter(t, attemptlog.Config{}, b.reg)
	eventually(t, 20*time.Second, "pending rows for every delivery record", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'pending' AND account = 'acct_1'`) == 4 &&
			b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'p-d000' AND status = 'delivered'`) == 1
	})
	stop()
	// Each row keeps where its record is (issue 32), the delivered one's
	// too (written with its attempt).
	first := map[string]string{}
	for _, r := range recs {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		first[d.ID] = fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	}
	positions := func() map[string]string {
		got := map[string]string{}
		rows, err := b.db.Store.Pool().Query(context.Background(), `SELECT id, record_topic || '/' || record_partition || '/' || record_offset FROM webhooks.deliveries`)
		require.NoError(t, err)
		var id, pos string
		_, err = pgx.ForEachRow(rows, []any{&id, &pos}, func() error { got[id] = pos; return nil })
		require.NoError(t, err)
		return got
	}
	require.Equal(t, first, positions())

	// The same records again (a replay of the topic): nothing changes.
	require.NoError(t, b.producer.ProduceSync(ctx, recs...).FirstErr())
	reg2 := prometheus.NewRegistry()
	b.startWriter(t, attemptlog.Config{}, reg2)
	eventually(t, 20*time.Second, "the second read", func() bool {
		return metrictest.Value(t, reg2, "hookd_attempt_log_records_total", "pending") >= 5
	})
	require.Equal(t, 5, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries`))
	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'p-d000' AND status = 'delivered'`))
	require.Equal(t, first, positions(), "a later copy of a record never moves its position")
}

func TestWriterSurvivesPostgresOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := history("pre", "ep1", 20)
	b.produce(t, before...)
	stop := b.startWriter(t, attemptlog.Config{MaxBatch: 25, DrainTimeout: 300 * time.Millisecond}, b.reg)
	eventually(t, 20*time.Second, "the first records in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(before)
	})

	// A real outage: the test database refuses connections and every
	// session on it is killed.
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ALTER DATABASE `+b.db.Name+` ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	restored := false
	restore := func() {
		if !restored {
			_, err := admin.Exec(ctx, `ALTER DATABASE `+b.db.Name+` ALLOW_CONNECTIONS true`)
			require.NoError(t, err)
			restored = true
		}
	}
	defer restore()
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, b.db.Name)
	require.NoError(t, err)

	// Dispatchers keep producing during the outage.
	during := history("mid", "ep1", 40)
	for i := 0; i < len(during); i += 20 {
		b.produce(t, during[i:min(i+20, len(during))]...)
	}
	eventually(t, 20*time.Second, "the writer to hit the outage", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_write_errors_total", "transient") >= 3 &&
			metrictest.Value(t, b.reg, "hookd_attempt_log_postgres_up") == 0
	})
	// Stop the writer mid-outage: its batch in hand is unwritten and must
	// not be committed. A fresh writer of the same group takes over.
	stop()
	after := history("post", "ep1", 20)
	b.produce(t, after...)
	reg2 := prometheus.NewRegistry()
	b.startWriter(t, attemptlog.Config{MaxBatch: 25}, reg2)
	eventually(t, 20*time.Second, "the new writer to retry against the outage", func() bool {
		return metrictest.Value(t, reg2, "hookd_attempt_log_write_errors_total", "transient") >= 2
	})
	restore()

	want := len(before) + len(during) + len(after)
	eventually(t, 30*time.Second, "the log to catch up", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == want
	})
	// No gap: every attempt id produced is there; no duplicate rows.
	ids := make([]string, 0, want)
	for _, r := range append(append(before, during...), after...) {
		ids = append(ids, r.AttemptID)
	}
	require.Equal(t, want, b.queryInt(t, `SELECT count(DISTINCT attempt_id) FROM webhooks.attempts WHERE attempt_id = ANY($1)`, ids))
	require.Equal(t, 80, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries`))
	require.Equal(t, 0, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status IN ('pending', 'retrying')`))
	require.Equal(t, 1.0, metrictest.Value(t, reg2, "hookd_attempt_log_postgres_up"))
}

func TestWriterDisablesEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addEndpoint(t, "ep-gone")
	b.addEndpoint(t, "ep-flaky")
	b.addEndpoint(t, "ep-down")
	b.startWriter(t, attemptlog.Config{DisableAfter: 72 * time.Hour}, b.reg)

	mk := func(id, ep string, n int, at time.Time, o attempt.Outcome) *attempt.Record {
		r := &attempt.Record{AttemptID: id, DeliveryID: "d-" + id, EventID: "e-" + id, EndpointID: ep, Account: "acct_1", Attempt: n,
			Tier: "webhooks.deliveries", StartedAt: at, Outcome: o, NextAction: attempt.NextRetry, NextDueAt: at.Add(time.Minute)}
		switch o {
		case attempt.OutcomeGone:
			r.StatusCode, r.NextAction, r.NextDueAt = 410, attempt.NextDeadLetter, time.Time{}
			r.DLQ, r.DeadReason = &attempt.Position{Topic: "webhooks.dlq"}, "gone"
		case attempt.OutcomeDelivered:
			r.StatusCode, r.NextAction, r.NextDueAt = 200, attempt.NextDone, time.Time{}
		default:
			r.StatusCode = 500
		}
		return r
	}
	failingSince := func(ep string) *time.Time {
		var ts *time.Time
		require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(),
			`SELECT failing_since FROM webhooks.endpoints WHERE id = $1`, ep).Scan(&ts))
		return ts
	}

	// failing_since: set by the first failure, cleared by a success.
	b.produce(t, mk("f1", "ep-flaky", 1, t0, attempt.OutcomeRetry))
	eventually(t, 20*time.Second, "failing_since set", func() bool {
		fs := failingSince("ep-flaky")
		return fs != nil && fs.Equal(t0)
	})
	b.produce(t, mk("f2", "ep-flaky", 1, t0.Add(time.Minute), attempt.OutcomeDelivered))
	eventually(t, 20*time.Second, "failing_since cleared", func() bool { return failingSince("ep-flaky") == nil })

	// 410: disabled at once, event on the ops topic.
	b.produce(t, mk("g1", "ep-gone", 1, t0, attempt.OutcomeGone))
	ev := b.awaitOpsEvent(t, "ep-gone")
	require.Equal(t, maintenance.EventTypeEndpointDisabled, ev.Type)
	require.Equal(t, "gone", ev.Reason)
	require.Equal(t, "https://example.com/hook", ev.URL)
	require.Equal(t, "disabled", b.status(t, "ep-gone"))
	// The endpoint is marked notified once the broker acknowledged the event.
	eventually(t, 10*time.Second, "ep-gone marked notified", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.endpoints WHERE id = 'ep-gone' AND disabled_notified_at IS NOT NULL`) == 1
	})

	// Failing continuously: not disabled at 71h, disabled past 72h (clock
	// injected), once.
	b.produce(t, mk("x1", "ep-down", 1, t0, attempt.OutcomeRetry))
	b.clock.Set(t0.Add(71 * time.Hour))
	b.produce(t, mk("x2", "ep-down", 2, t0.Add(71*time.Hour), attempt.OutcomeRetry))
	eventually(t, 20*time.Second, "x2 written", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE attempt_id = 'x2'`) == 1
	})
	require.Equal(t, "active", b.status(t, "ep-down"))
	b.clock.Set(t0.Add(72*time.Hour + time.Minute))
	b.produce(t, mk("x3", "ep-down", 3, t0.Add(72*time.Hour), attempt.OutcomeRetry))
	ev = b.awaitOpsEvent(t, "ep-down")
	require.Equal(t, "failing", ev.Reason)
	require.True(t, ev.FailingSince.Equal(t0))
	require.True(t, ev.DisabledAt.Equal(t0.Add(72*time.Hour+time.Minute)))
	require.Equal(t, "disabled", b.status(t, "ep-down"))
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_endpoints_disabled_total", "failing"))
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_endpoints_disabled_total", "gone"))

	// Re-enabling clears the state.
	_, err := b.db.Store.Pool().Exec(context.Background(), `UPDATE webhooks.endpoints SET status = 'active' WHERE id = 'ep-down'`)
	require.NoError(t, err)
	require.Nil(t, failingSince("ep-down"))
	require.Equal(t, 0, b.queryInt(t, `SELECT count(*) FROM webhooks.endpoints WHERE id = 'ep-down' AND (disabled_reason IS NOT NULL OR disabled_at IS NOT NULL)`))
}

func (b *bundle) status(t *testing.T, ep string) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Store.Pool().QueryRow(context.Background(), `SELECT status FROM webhooks.endpoints WHERE id = $1`, ep).Scan(&s))
	return s
}

// awaitOpsEvent reads the ops topic from the start until the
// endpoint.disabled event of ep.
func (b *bundle) awaitOpsEvent(t *testing.T, ep string) maintenance.Event {
	t.Helper()
	cl := b.kafka.Client(t, kgo.ConsumeTopics(b.names.Ops), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no endpoint.disabled event for %s on %s", ep, b.names.Ops)
		}
		for _, r := range fs.Records() {
			ev, err := maintenance.DecodeEvent(r)
			require.NoError(t, err)
			if ev.EndpointID == ep {
				require.Equal(t, ep, string(r.Key))
				return ev
			}
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	deps := attemptlog.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()}
	_, err := attemptlog.New(attemptlog.Config{MaxBatch: -1}, deps)
	require.ErrorContains(t, err, "max batch")
	require.ErrorContains(t, err, "-1")
	_, err = attemptlog.New(attemptlog.Config{MaxBatchBytes: 1000}, deps)
	require.ErrorContains(t, err, "max batch bytes: must be between 1 MiB and 1 GiB, got 1000")
	_, err = attemptlog.New(attemptlog.Config{DisableAfter: time.Second}, deps)
	require.ErrorContains(t, err, "disable after: must be at least 1m, got 1s")
	_, err = maintenance.NewMaintainer(maintenance.MaintainerConfig{Retention: time.Hour}, maintenance.MaintainerDeps{})
	require.ErrorContains(t, err, "attempt retention: must be at least 24h, got 1h0m0s")
}

func TestTwoWritersShareTheLogWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := history("two", "ep1", 120) // 300 records
	b.startWriter(t, attemptlog.Config{MaxBatch: 30}, b.reg)
	b.startWriter(t, attemptlog.Config{MaxBatch: 30}, prometheus.NewRegistry())
	for i := 0; i < len(recs); i += 25 {
		b.produce(t, recs[i:min(i+25, len(recs))]...)
	}
	eventually(t, 30*time.Second, "every attempt in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs)
	})
	require.Equal(t, len(recs), b.queryInt(t, `SELECT count(DISTINCT attempt_id) FROM webhooks.attempts`))
	require.Equal(t, 0, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status IN ('pending', 'retrying')`))
	require.Equal(t, 4, b.queryInt(t, `SELECT attempts FROM webhooks.deliveries WHERE id = 'two-d003'`))
}

func TestWriterRetriesAHungPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.startWriter(t, attemptlog.Config{WriteTimeout: 200 * time.Millisecond}, b.reg)

	// Another session holds the attempt log locked: writes hang rather than
	// fail, and must time out, count as down and be retried.
	locker, err := b.db.Store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, `LOCK TABLE webhooks.attempts IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	recs := history("hung", "ep1", 10)
	b.produce(t, recs...)
	eventually(t, 20*time.Second, "the writer to time out twice", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_write_errors_total", "transient") >= 2 &&
			metrictest.Value(t, b.reg, "hookd_attempt_log_postgres_up") == 0
	})
	require.NoError(t, locker.Rollback(ctx))
	eventually(t, 20*time.Second, "the log to catch up", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts`) == len(recs)
	})
	// The gauge moves just after the commit the rows came with.
	eventually(t, 10*time.Second, "Postgres counted up again", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_postgres_up") == 1
	})
}

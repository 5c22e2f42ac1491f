package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store"
)

// poisonShape is one way an event can be impossible to deliver, written
// both ways an event enters hookd: as an outbox row and as an envelope on
// the events topic.
type poisonShape struct {
	name string
	// row is the outbox INSERT's column list and values (%[1]s is the row's
	// id, %[2]s its account); "" when Postgres cannot hold the shape.
	row string
	// envelope is the same event on the events topic (%[1]s the id, %[2]s
	// the account).
	envelope string
	// class is the envelope's reason (hookd-dlq-error-class) on both paths.
	class event.Reason
	// pgRefuses: Postgres refuses row at insert (the application's
	// transaction fails), so nothing reaches the relay.
	pgRefuses bool
}

var (
	deepSQL  = `'{"x":' || repeat('[',10000) || '1' || repeat(']',10000) || '}'`
	deepJSON = `{"x":` + strings.Repeat("[", 10000) + "1" + strings.Repeat("]", 10000) + `}`
)

// poisonShapes: the deep nesting, size, encoding, and the other
// fields a row can get wrong. Invalid UTF-8 and unpaired surrogates cannot
// be in a jsonb column of a UTF-8 database: Postgres refuses the INSERT
// (checked); TestNonUTF8RowIsDeadLetteredInvalidData writes them into a
// SQL_ASCII database, which takes them.
var poisonShapes = []poisonShape{
	{name: "deep_nesting", class: event.ReasonInvalidJSON,
		row:      `(id, account, type, payload) VALUES ('%[1]s', '%[2]s', 'inv.paid', (` + deepSQL + `)::jsonb)`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.paid","data":` + deepJSON + `}`},
	{name: "oversize", class: event.ReasonOversize,
		row:      `(id, account, type, payload) VALUES ('%[1]s', '%[2]s', 'inv.paid', jsonb_build_object('x', repeat('a', 300*1024)))`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.paid","data":{"x":"` + strings.Repeat("a", 300<<10) + `"}}`},
	{name: "long_account", class: event.ReasonOversize, // the dead letter's key is the account: clipped
		row:      `(id, account, type) VALUES ('%[1]s', '%[2]s' || repeat('a', 2*1024*1024), 'inv.paid')`,
		envelope: `{"id":"%[1]s","account":"%[2]s` + strings.Repeat("a", 300<<10) + `","type":"inv.paid"}`},
	{name: "data_not_object", class: event.ReasonInvalidData,
		row:      `(id, account, type, payload) VALUES ('%[1]s', '%[2]s', 'inv.paid', '[1,2]')`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.paid","data":[1,2]}`},
	{name: "invalid_utf8", class: event.ReasonInvalidData, pgRefuses: true,
		row:      `(id, account, type, payload) VALUES ('%[1]s', '%[2]s', 'inv.paid', convert_from('\x7b2278223a2022ff227d', 'UTF8')::jsonb)`,
		envelope: "{\"id\":\"%[1]s\",\"account\":\"%[2]s\",\"type\":\"inv.paid\",\"data\":{\"x\":\"\xff\"}}"},
	{name: "lone_surrogate", class: event.ReasonInvalidData, pgRefuses: true,
		row:      `(id, account, type, payload) VALUES ('%[1]s', '%[2]s', 'inv.paid', '{"x":"\ud800"}')`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.paid","data":{"x":"\ud800"}}`},
	{name: "account_with_space", class: event.ReasonInvalidAccount,
		row:      `(id, account, type) VALUES ('%[1]s', '%[2]s x', 'inv.paid')`,
		envelope: `{"id":"%[1]s","account":"%[2]s x","type":"inv.paid"}`},
	{name: "type_wildcard", class: event.ReasonInvalidType,
		row:      `(id, account, type) VALUES ('%[1]s', '%[2]s', 'inv.*')`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.*"}`},
	{name: "created_year_12000", class: event.ReasonInvalidCreated,
		row:      `(id, account, type, created_at) VALUES ('%[1]s', '%[2]s', 'inv.paid', '12000-01-01 00:00:00+00')`,
		envelope: `{"id":"%[1]s","account":"%[2]s","type":"inv.paid","created":"12000-01-01T00:00:00Z"}`},
}

// TestPoisonEventsAreDeadLetteredAlikeOnBothPaths is issue 29's repro,
// generalised: each poison shape is written as an outbox row (then a
// normal row) and as an envelope on the events topic (then a normal
// envelope), with the relay and the router running. Every poison event is
// dead-lettered once with the same envelope reason on both paths
// (hookd-dlq-error-class; hookd-dlq-reason is invalid_envelope, except the
// relay's summary of an oversize row, reason oversize), every normal event
// is fanned out exactly once, the relay's stream never restarts and the
// relay stays ready.
func TestPoisonEventsAreDeadLetteredAlikeOnBothPaths(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	dlq, deliveries := e.startRouter(t)
	reg := prometheus.NewRegistry()
	rl := e.newRelayWith(t, e.relayConfig(), reg)
	start(t, rl.Run)
	e.waitStreaming(t)
	producer := e.kafka.Client(t, kgo.ProducerBatchMaxBytes(1<<20))

	want := map[string]event.Reason{} // by dead letter key: the account
	ok := map[string]bool{}
	for _, s := range poisonShapes {
		// The outbox path.
		id, account := "outbox_"+s.name, "acct_outbox_"+s.name
		tx, err := e.db.Store.Pool().Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL session_replication_role = replica`) // past the size trigger
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO webhooks.outbox `+fmt.Sprintf(s.row, id, account))
		if s.pgRefuses {
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "%s: Postgres refuses it at insert", s.name)
			require.NoError(t, tx.Rollback(ctx))
		} else {
			require.NoError(t, err, s.name)
			require.NoError(t, tx.Commit(ctx))
			want[account+"|"+s.name] = s.class
		}
		okID := "ok_after_" + id
		e.insertFor(t, okID, "acct_ok")
		ok[okID] = true

		// The events topic.
		account = "acct_ingress_" + s.name
		raw := fmt.Sprintf(s.envelope, "ingress_"+s.name, account)
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: e.names.Events, Key: []byte(account), Value: []byte(raw)}).FirstErr(), s.name)
		want[account+"|"+s.name] = s.class
		okID = "ok_after_ingress_" + s.name
		require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: e.names.Events, Key: []byte("acct_ok"),
			Value: fmt.Appendf(nil, `{"id":"%s","account":"acct_ok","type":"inv.paid"}`, okID)}).FirstErr())
		ok[okID] = true
	}

	waitFor(t, "every poison event dead-lettered and every normal event fanned out", 60*time.Second, func() bool {
		return dlq.len() >= len(want) && len(deliveries.deliveries(t)) >= len(ok)
	})
	got := map[string]event.Reason{}
	dlq.mu.Lock()
	for _, r := range dlq.recs {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		key := string(r.Key)
		prefix := "acct_outbox_"
		if !strings.HasPrefix(key, prefix) {
			prefix = "acct_ingress_"
		}
		name := ""
		for _, s := range poisonShapes {
			if strings.HasPrefix(key, prefix+s.name) {
				name = s.name
			}
		}
		key = prefix + name
		wantReason := deadletter.ReasonInvalidEnvelope
		if prefix == "acct_outbox_" && (name == "oversize" || name == "long_account") {
			wantReason = deadletter.ReasonOversize
		}
		require.Equal(t, wantReason, p.Reason, "%s: hookd-dlq-reason", key)
		_, seen := got[key+"|"+name]
		require.False(t, seen, "%s dead-lettered twice", key)
		got[key+"|"+name] = event.Reason(p.ErrorClass)
	}
	dlq.mu.Unlock()
	require.Equal(t, want, got, "the envelope reason of each poison event, by path")

	for k, n := range deliveries.deliveries(t) {
		id := strings.TrimSuffix(k, "/ep_ok")
		require.True(t, ok[id], "unexpected delivery %s", k)
		require.Equal(t, 1, n, "%s fanned out %d times", k, n)
	}
	require.Len(t, deliveries.deliveries(t), len(ok))
	require.Equal(t, 0.0, metric(t, reg, "hookd_relay_stream_failures_total", ""), "the relay's stream never restarted")
	require.Equal(t, 1.0, metric(t, reg, "hookd_relay_events_dead_lettered_total", deadletter.ReasonInvalidEnvelope))
	require.NoError(t, rl.Ready(ctx))
}

// insertFor commits one outbox row of account with a small payload.
func (e *env) insertFor(t testing.TB, id, account string) {
	t.Helper()
	_, err := e.db.Store.Pool().Exec(context.Background(),
		`INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ($1, $2, 'inv.paid', '{"n":1}')`, id, account)
	require.NoError(t, err)
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// TestStalledRelayIsNotReady: while Kafka refuses every record of the
// events topic (UNKNOWN_SERVER_ERROR: the stream fails and restarts), the
// relay makes no progress with a row waiting: after StallTimeout, Ready
// says so with the last error; once Kafka takes records again the row is
// published and the relay is ready again, and stays so while idle.
func TestStalledRelayIsNotReady(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	events := collect(t, e.kafka, e.names.Events)
	cfg := e.relayConfig()
	cfg.RetryBackoff, cfg.StallTimeout = 10*time.Millisecond, time.Second
	rl := e.newRelay(t, cfg)
	start(t, rl.Run)
	e.waitStreaming(t)
	require.NoError(t, rl.Ready(ctx))

	var refuse atomic.Bool
	refuse.Store(true)
	e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Events, Err: kerr.UnknownServerError, Count: -1,
		When: func(kmsg.Request) bool { return refuse.Load() }})
	e.insertFor(t, "waiting", "acct_1")
	var err error
	waitFor(t, "the relay reported stalled", 20*time.Second, func() bool { err = rl.Ready(ctx); return err != nil })
	require.ErrorContains(t, err, "stalled: no progress for")
	require.ErrorContains(t, err, "UNKNOWN_SERVER_ERROR")

	refuse.Store(false)
	waitFor(t, "the row published", 20*time.Second, func() bool { return events.eventIDs(t)["waiting"] == 1 })
	waitFor(t, "the relay ready again", 10*time.Second, func() bool { return rl.Ready(ctx) == nil })
	for deadline := time.Now().Add(2 * cfg.StallTimeout); time.Now().Before(deadline); {
		require.NoError(t, rl.Ready(ctx), "an idle relay is not stalled")
		<-time.After(50 * time.Millisecond) // the clock has to pass StallTimeout: nothing else to wait for
	}
}

// sqlASCIIDB creates a migrated database of encoding SQL_ASCII for t: the
// one kind of database whose jsonb columns hold bytes that are not UTF-8
// (Postgres stores them unchecked), so the only way such data reaches the
// relay.
func sqlASCIIDB(t *testing.T) *pgtest.DB {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "hookd_test_ascii_" + hex.EncodeToString(b[:])
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	require.NoError(t, err)
	cfg := admin.Config()
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, name)
	if cfg.Password != "" {
		dsn += " password=" + cfg.Password
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() {
		st.Close()
		conn, err := pgx.Connect(context.Background(), pgtest.BaseURL())
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", name)
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	_, err = st.Migrate(ctx)
	require.NoError(t, err)
	return &pgtest.DB{URL: dsn, Name: name, Store: st}
}

// TestNonUTF8RowIsDeadLetteredInvalidData: in a SQL_ASCII database an
// outbox row's data can hold bytes that are not UTF-8 (raw 0xff, an
// encoded surrogate). The relay publishes the row and the router
// dead-letters it invalid_data, as it does the same envelope from any
// producer; the normal row after it is fanned out once and the stream
// never restarts. Before issue 29 both went to receivers.
func TestNonUTF8RowIsDeadLetteredInvalidData(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.db = sqlASCIIDB(t)
	ctx := context.Background()
	dlq, deliveries := e.startRouter(t)
	reg := prometheus.NewRegistry()
	start(t, e.newRelayWith(t, e.relayConfig(), reg).Run)
	e.waitStreaming(t)

	// Written by Postgres itself: the server checks a client's UTF-8 even
	// in a SQL_ASCII database.
	for id, bytes := range map[string]string{"bad_ff": `chr(255)`, "bad_surrogate": `chr(237) || chr(160) || chr(128)`} {
		_, err := e.db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type, payload)
			VALUES ($1, 'acct_bad', 'inv.paid', ('{"x": "' || `+bytes+` || '"}')::jsonb)`, id)
		require.NoError(t, err)
	}
	e.insertFor(t, "ok_after", "acct_ok")
	waitFor(t, "both rows dead-lettered and the normal row fanned out", 30*time.Second, func() bool {
		return dlq.len() >= 2 && deliveries.deliveries(t)["ok_after/ep_ok"] >= 1
	})
	dlq.mu.Lock()
	for _, r := range dlq.recs {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.ReasonInvalidEnvelope, p.Reason)
		require.Equal(t, string(event.ReasonInvalidData), p.ErrorClass)
		require.Equal(t, "acct_bad", string(r.Key))
	}
	require.Len(t, dlq.recs, 2)
	dlq.mu.Unlock()
	require.Equal(t, map[string]int{"ok_after/ep_ok": 1}, deliveries.deliveries(t))
	require.Equal(t, 0.0, metric(t, reg, "hookd_relay_stream_failures_total", ""))
}

// startRouter runs the endpoint index (endpoint ep_ok of acct_ok) and a
// router, and collects the DLQ and the deliveries topic.
func (e *env) startRouter(t *testing.T) (dlq, deliveries *collector) {
	t.Helper()
	_, err := e.db.Store.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: "ep_ok", Account: "acct_ok", URL: "http://127.0.0.1:1/ok",
		Secrets: []string{endpoint.NewSecret()}})
	require.NoError(t, err)
	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: e.db.Store, Logger: e.logger})
	require.NoError(t, err)
	start(t, idx.Run)
	rt, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: idx,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger})
	require.NoError(t, err)
	start(t, rt.Run)
	return collect(t, e.kafka, e.names.DLQ), collect(t, e.kafka, e.names.Deliveries)
}

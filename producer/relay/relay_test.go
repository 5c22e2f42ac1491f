package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer"
	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/producer/relay"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type env struct {
	db     *pgtest.DB
	kafka  *kafkatest.Cluster
	names  topics.Names
	tcfg   topics.Config
	slot   string
	logger *slog.Logger
}

func setup(t testing.TB) *env {
	t.Helper()
	tc := topics.Config{Partitions: 3}
	var b [4]byte
	_, _ = rand.Read(b[:])
	level := slog.LevelError
	if os.Getenv("HOOKD_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return &env{
		db:     pgtest.New(t),
		kafka:  kafkatest.NewProvisioned(t, tc),
		names:  topics.NamesFor(tc),
		tcfg:   tc,
		slot:   "hookd_test_" + hex.EncodeToString(b[:]),
		logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
}

func (e *env) relayConfig() relay.Config {
	return relay.Config{Slot: e.slot, EventsTopic: e.names.Events, LeaderPoll: 100 * time.Millisecond,
		StatusInterval: 100 * time.Millisecond, MetricsInterval: 100 * time.Millisecond}
}

func (e *env) newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg, relay.Deps{Store: e.db.Store, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: e.logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	return r
}

// start runs f in the background; the returned stop cancels it and waits
// for it (also done when t ends).
func start(t testing.TB, f func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("did not return within 30s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

// collector consumes a topic from the start in the background.
type collector struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func collect(t testing.TB, c *kafkatest.Cluster, topic string) *collector {
	t.Helper()
	col := &collector{}
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	start(t, func(ctx context.Context) error {
		for ctx.Err() == nil {
			f := cl.PollFetches(ctx)
			col.mu.Lock()
			col.recs = append(col.recs, f.Records()...)
			col.mu.Unlock()
		}
		return nil
	})
	return col
}

// eventIDs counts envelopes by id.
func (c *collector) eventIDs(t testing.TB) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, r := range c.recs {
		env, err := event.Parse(r.Value, event.Origin{}, 0)
		require.NoError(t, err)
		out[env.ID]++
	}
	return out
}

// deliveries counts delivery records by "event/endpoint".
func (c *collector) deliveries(t testing.TB) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, r := range c.recs {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		out[d.EventID+"/"+d.EndpointID]++
	}
	return out
}

// waitStreaming waits until a relay has created and back-filled the slot
// and streams from it.
func (e *env) waitStreaming(t testing.TB) {
	t.Helper()
	waitFor(t, "a relay streaming from slot "+e.slot, 20*time.Second, func() bool {
		s, err := e.db.Store.ReplicationSlot(context.Background(), e.slot)
		return err == nil && s.Exists && s.Backfilled && s.Active
	})
}

func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	wait.For(t, within, what, cond)
}

// insert commits (or rolls back) one transaction with one outbox event.
func (e *env) insert(t testing.TB, id, account, typ string, commit bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.db.Store.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: id, Account: account, Type: typ, Data: map[string]any{"n": id}})
	require.NoError(t, err)
	if commit {
		require.NoError(t, tx.Commit(ctx))
	} else {
		require.NoError(t, tx.Rollback(ctx))
	}
}

func TestOutboxToDeliveries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	st := e.db.Store
	for _, ep := range []endpoint.Endpoint{
		{ID: "ep_all", Account: "acct_1"},
		{ID: "ep_inv", Account: "acct_1", EventTypes: []string{"invoice.*"}},
		{ID: "ep_off", Account: "acct_1", Status: endpoint.StatusDisabled},
		{ID: "ep_2", Account: "acct_2", EventTypes: []string{"customer.created"}},
	} {
		ep.URL, ep.Secrets = "http://127.0.0.1:1/"+ep.ID, []string{endpoint.NewSecret()}
		_, err := st.CreateEndpoint(ctx, ep)
		require.NoError(t, err)
	}
	// subscribers of (account, type), as the test's oracle.
	subscribers := func(account, typ string) []string {
		switch {
		// ep_off is disabled: it still gets deliveries, which the
		// dispatcher dead-letters as endpoint_disabled.
		case account == "acct_1" && typ == "invoice.paid":
			return []string{"ep_all", "ep_inv", "ep_off"}
		case account == "acct_1":
			return []string{"ep_all", "ep_off"}
		case account == "acct_2" && typ == "customer.created":
			return []string{"ep_2"}
		}
		return nil
	}
	want := map[string]int{}
	expect := func(id, account, typ string) {
		for _, ep := range subscribers(account, typ) {
			want[id+"/"+ep] = 1
		}
	}
	accounts := []string{"acct_1", "acct_2"}
	typesOf := []string{"invoice.paid", "customer.created"}

	// Committed before the relay ever ran: published by the back-fill.
	for i := range 20 {
		id := fmt.Sprintf("pre_%d", i)
		e.insert(t, id, accounts[i%2], typesOf[i/2%2], true)
		expect(id, accounts[i%2], typesOf[i/2%2])
	}

	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: st, Logger: e.logger})
	require.NoError(t, err)
	start(t, idx.Run)
	rt, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: idx,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger})
	require.NoError(t, err)
	start(t, rt.Run)
	rl := e.newRelay(t, e.relayConfig())
	start(t, rl.Run)
	out := collect(t, e.kafka, e.names.Deliveries)
	e.waitStreaming(t)

	// A transaction left open while later ones commit.
	longTx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = producer.Outbox(ctx, longTx, producer.Event{ID: "long", Account: "acct_1", Type: "invoice.paid"})
	require.NoError(t, err)
	expect("long", "acct_1", "invoice.paid")

	const n, m = 300, 60
	for i := range n + m {
		id := fmt.Sprintf("evt_%d", i)
		acct, typ := accounts[i%2], typesOf[i/2%2]
		commit := i%6 != 5 // every sixth rolls back
		e.insert(t, id, acct, typ, commit)
		if commit {
			expect(id, acct, typ)
		} else {
			want["rolledback:"+id] = 0
		}
	}
	require.NoError(t, longTx.Commit(ctx))
	for k := range want {
		if want[k] == 0 {
			delete(want, k)
		}
	}

	waitFor(t, "every committed event on the deliveries topic", 30*time.Second, func() bool {
		return len(out.deliveries(t)) >= len(want)
	})
	got := out.deliveries(t)
	for k, c := range got {
		require.Equal(t, 1, c, "delivery %s published %d times", k, c)
		require.Contains(t, want, k, "unexpected delivery %s (rolled back or unsubscribed)", k)
	}
	require.Equal(t, len(want), len(got))

	// The slot's confirmed position moves; pruning leaves the table bounded.
	lag, err := st.ReplicationSlotLag(ctx, e.slot)
	require.NoError(t, err)
	require.NotZero(t, lag.ConfirmedLSN)
}

func TestFailoverBetweenRelays(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	a, b := e.newRelay(t, e.relayConfig()), e.newRelay(t, e.relayConfig())
	stopA := start(t, a.Run)
	waitFor(t, "relay A to lead", 10*time.Second, a.Leading)
	e.waitStreaming(t)
	stopB := start(t, b.Run)

	// Stream for a while; B must only stand by.
	for i := range 100 {
		e.insert(t, fmt.Sprintf("a_%d", i), "acct_1", "invoice.paid", true)
	}
	waitFor(t, "relay A's events", 10*time.Second, func() bool { return len(events.eventIDs(t)) == 100 })
	require.False(t, b.Leading(), "only one relay streams")

	// Stop A in the middle of a burst; B takes over within seconds.
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 300 {
			e.insert(t, fmt.Sprintf("b_%d", i), "acct_1", "invoice.paid", true)
		}
	})
	require.NoError(t, stopA())
	took := time.Now()
	waitFor(t, "relay B to take over", 10*time.Second, b.Leading)
	t.Logf("takeover in %s", time.Since(took))
	wg.Wait()
	waitFor(t, "every event after the takeover", 20*time.Second, func() bool { return len(events.eventIDs(t)) == 400 })
	dups := 0
	for _, c := range events.eventIDs(t) {
		dups += c - 1
	}
	t.Logf("published twice or more: %d of 400", dups)

	// Never from the current WAL position: events committed while no relay
	// runs are published by the next one.
	require.NoError(t, stopB())
	for i := range 50 {
		e.insert(t, fmt.Sprintf("c_%d", i), "acct_2", "x.y", true)
	}
	c := e.newRelay(t, e.relayConfig())
	start(t, c.Run)
	waitFor(t, "events committed while no relay ran", 20*time.Second, func() bool { return len(events.eventIDs(t)) == 450 })
}

func TestPruneKeepsOutboxBounded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	cfg := e.relayConfig()
	cfg.PruneInterval, cfg.PruneAfter = 50*time.Millisecond, time.Nanosecond
	r := e.newRelay(t, cfg)
	start(t, r.Run)
	for i := range 50 {
		e.insert(t, fmt.Sprintf("p_%d", i), "acct_1", "t", true)
	}
	waitFor(t, "outbox pruned", 10*time.Second, func() bool {
		var n int
		_ = e.db.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM webhooks.outbox`).Scan(&n)
		return n == 0
	})
	waitFor(t, "pruned rows still published", 10*time.Second, func() bool { return len(events.eventIDs(t)) == 50 })
}

func TestRoleWithoutReplicationIsOneClearLine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "hookd_norepl_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, e.db.URL)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'pw' NOREPLICATION NOSUPERUSER`, role))
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.BaseURL())
		if err == nil {
			defer c.Close(context.Background())
			// The test database is dropped after this cleanup runs; wait for it.
			_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP ROLE IF EXISTS %s`, role))
		}
	})
	cfg, err := pgx.ParseConfig(e.db.URL)
	require.NoError(t, err)
	url := fmt.Sprintf("postgres://%s:pw@%s:%d/%s?sslmode=disable", role, cfg.Host, cfg.Port, cfg.Database)
	if cfg.Host[0] == '/' {
		url = fmt.Sprintf("postgres://%s:pw@/%s?host=%s&port=%d", role, cfg.Database, cfg.Host, cfg.Port)
	}
	st, err := storeOpen(ctx, url)
	require.NoError(t, err)
	defer st.Close()
	r, err := relay.New(e.relayConfig(), relay.Deps{Store: st, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = r.Run(rctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "lacks the REPLICATION attribute")
	require.NotContains(t, err.Error(), "\n")
}

// TestWalLevelNotLogicalIsOneClearLine needs a server without
// wal_level=logical (plain `pg_virtualenv go test ./producer/relay/`); it skips on a
// logical one.
// TestForeignSlotIsOneClearLine: a slot of the relay's name that belongs to
// another database (slots are cluster-wide) stops the relay with one line,
// promptly, instead of hanging as the leader.
func TestForeignSlotIsOneClearLine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	other := pgtest.New(t)
	ctx := context.Background()
	_, err := other.Store.Pool().Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = other.Store.Pool().Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.slot)
	})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = e.newRelay(t, e.relayConfig()).Run(rctx)
	require.NoError(t, rctx.Err(), "the relay must give up on its own, not wait for the deadline")
	require.ErrorIs(t, err, store.ErrRelaySetup)
	require.Contains(t, err.Error(), fmt.Sprintf("replication slot %q exists for database %q", e.slot, other.Name))
	require.NotContains(t, err.Error(), "\n")
}

// TestWalLevelNotLogicalIsOneClearLine runs the relay against a Postgres
// cluster of the test's own with wal_level=replica.
func TestWalLevelNotLogicalIsOneClearLine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pg, err := pgcluster.Start(ctx, pgcluster.Config{WalLevel: "replica"})
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	st, err := store.Open(ctx, store.Config{DatabaseURL: pg.URL()}, e.logger)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx)
	require.NoError(t, err)

	r, err := relay.New(e.relayConfig(), relay.Deps{Store: st, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: e.logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	err = r.Run(ctx)
	require.NoError(t, ctx.Err(), "the relay must give up on its own")
	require.ErrorIs(t, err, store.ErrRelaySetup)
	require.Contains(t, err.Error(), `wal_level is "replica" but the relay needs logical`)
	require.NotContains(t, err.Error(), "\n")
}

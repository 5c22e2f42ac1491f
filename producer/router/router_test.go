package router_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

type env struct {
	db     *pgtest.DB
	kafka  *kafkatest.Cluster
	names  topics.Names
	index  *endpoint.Index
	reg    *prometheus.Registry
	logger *slog.Logger
}

func setup(t testing.TB) *env {
	t.Helper()
	tc := topics.Config{Partitions: 3}
	e := &env{
		db:     pgtest.New(t),
		kafka:  kafkatest.NewProvisioned(t, tc),
		names:  topics.NamesFor(tc),
		reg:    prometheus.NewRegistry(),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: e.db.Store, Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	e.index = idx
	run(t, idx.Run)
	return e
}

// run starts f in the background and, when t ends, cancels it and waits
// for it to return nil.
func run(t testing.TB, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of cancel")
		}
	})
}

func (e *env) endpoint(t testing.TB, id, account string, status endpoint.Status, types ...string) {
	t.Helper()
	e.filteredEndpoint(t, id, account, status, "", types...)
}

// filteredEndpoint creates an endpoint with a payload filter ("" for none)
// and waits until the index holds it: the index loads endpoints created
// after it started in the background, and an event routed before it has
// them is fanned out without them.
func (e *env) filteredEndpoint(t testing.TB, id, account string, status endpoint.Status, filter string, types ...string) {
	t.Helper()
	_, err := e.db.Store.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: id, Account: account, URL: "http://127.0.0.1:1/" + id,
		Secrets: []string{endpoint.NewSecret()}, EventTypes: types, Status: status, Filter: []byte(filter)})
	require.NoError(t, err)
	wait.For(t, 10*time.Second, "the index to load endpoint "+id, func() bool {
		_, ok := e.index.Endpoint(id)
		return ok
	})
}

func (e *env) startRouter(t testing.TB) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: e.index,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	run(t, r.Run)
	return r
}

func (e *env) produce(t testing.TB, values ...string) {
	t.Helper()
	cl := e.kafka.Client(t)
	for _, v := range values {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.names.Events, Key: []byte("k"), Value: []byte(v)}).FirstErr())
	}
}

// consume reads topic from the start, read_committed as hookd's readers
// of the router's topics do, until it holds want records (then waits
// briefly for extras) or the deadline passes.
func consume(t testing.TB, c *kafkatest.Cluster, topic string, want int, deadline time.Duration) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var out []*kgo.Record
	end := time.Now().Add(deadline)
	settle := time.Time{}
	for time.Now().Before(end) {
		if len(out) >= want {
			if settle.IsZero() {
				settle = time.Now().Add(300 * time.Millisecond)
			} else if time.Now().After(settle) {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		f := cl.PollFetches(ctx)
		cancel()
		out = append(out, f.Records()...)
	}
	return out
}

func TestFanOutRespectsSubscriptions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_all", "acct_1", endpoint.StatusActive)
	e.endpoint(t, "ep_inv", "acct_1", endpoint.StatusActive, "invoice.*")
	e.endpoint(t, "ep_cust", "acct_1", endpoint.StatusActive, "customer.created")
	e.endpoint(t, "ep_off", "acct_1", endpoint.StatusDisabled)
	e.endpoint(t, "ep_acct2", "acct_2", endpoint.StatusActive)
	e.startRouter(t)

	e.produce(t,
		`{"id":"evt_1","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_1"},"created":"2026-01-02T03:04:05Z"}`,
		`{"id":"evt_2","account":"acct_1","type":"customer.created"}`,
		`{"id":"evt_3","account":"acct_1","type":"charge.refunded"}`,
		`{"id":"evt_4","account":"acct_3","type":"invoice.paid"}`, // no endpoint
		`{"account":"acct_2","type":"invoice.paid"}`,              // id derived
		`{"account":"acct_1","type":"invoice.paid"`,               // malformed
		`{"account":"acct_1"}`, // missing type
	)
	// evt_1 -> all, inv, off; evt_2 -> all, cust, off; evt_3 -> all, off;
	// derived -> acct2. The disabled endpoint gets its deliveries (the
	// dispatcher dead-letters them as endpoint_disabled, resendable later).
	recs := consume(t, e.kafka, e.names.Deliveries, 9, 20*time.Second)
	got := map[string][]string{}
	for _, r := range recs {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		require.Equal(t, string(r.Key), d.EndpointID)
		require.Equal(t, delivery.ID(d.EventID, d.EndpointID), d.ID)
		require.Equal(t, 1, d.Attempt)
		var body struct {
			ID, Type string
			Data     json.RawMessage
		}
		require.NoError(t, json.Unmarshal(d.Body, &body))
		require.Equal(t, d.EventID, body.ID)
		require.Equal(t, d.EventType, body.Type)
		if d.EventID == "evt_1" {
			require.JSONEq(t, `{"id":"evt_1","type":"invoice.paid","created":"2026-01-02T03:04:05Z","data":{"invoice":"in_1"}}`, string(d.Body))
		}
		key := d.EventID
		if d.Account == "acct_2" {
			key = "derived"
			require.Regexp(t, `^evt_[0-9a-f]{32}$`, d.EventID)
		}
		got[key] = append(got[key], d.EndpointID)
	}
	for _, v := range got {
		sort.Strings(v)
	}
	require.Equal(t, map[string][]string{
		"evt_1":   {"ep_all", "ep_inv", "ep_off"},
		"evt_2":   {"ep_all", "ep_cust", "ep_off"},
		"evt_3":   {"ep_all", "ep_off"},
		"derived": {"ep_acct2"},
	}, got)

	dlq := consume(t, e.kafka, e.names.DLQ, 2, 10*time.Second)
	require.Len(t, dlq, 2)
	reasons := map[string]string{}
	for _, r := range dlq {
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.ReasonInvalidEnvelope, p.Reason)
		require.Equal(t, e.names.Events, p.OriginTopic)
		require.Equal(t, "k", string(r.Key), "original key kept")
		reasons[p.ErrorClass] = string(r.Value)
	}
	require.Equal(t, map[string]string{
		"invalid_json": `{"account":"acct_1","type":"invoice.paid"`,
		"missing_type": `{"account":"acct_1"}`,
	}, reasons)

	require.Eventually(t, func() bool {
		return counter(t, e.reg, "hookd_router_events_total", "no_match") == 1 &&
			counter(t, e.reg, "hookd_router_events_total", "invalid") == 2 &&
			counter(t, e.reg, "hookd_router_events_total", "fanned_out") == 4
	}, 10*time.Second, 20*time.Millisecond)
}

func TestPendingRowKeepsLaterStatus(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	row := store.PendingDelivery{ID: delivery.ID("e", "p"), EventID: "e", EndpointID: "p", Account: "a", EventType: "t", EventCreated: time.Now()}
	// The attempt-log writer got there first.
	_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, status, attempts, event_created_at)
		VALUES ($1, 'e', 'p', 'a', 't', 'delivered', 1, now())`, row.ID)
	require.NoError(t, err)
	require.NoError(t, db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{row, row}))
	var status string
	require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT status FROM webhooks.deliveries WHERE id = $1`, row.ID).Scan(&status))
	require.Equal(t, "delivered", status)
}

// counter returns the value of the counter child of name whose label has
// the value label.
func counter(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

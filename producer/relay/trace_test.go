package relay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/producer"
	"github.com/hookd/hookd/producer/relay"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store/attemptlog"
)

// appTraceparent is the application's span that wrote the outbox row.
const (
	appTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	appSpanID      = "00f067aa0ba902b7"
	appTraceparent = "00-" + appTraceID + "-" + appSpanID + "-01"
)

// traceReceiver answers 200 and keeps each request's traceparent header.
type traceReceiver struct {
	mu      sync.Mutex
	headers []string
}

func (r *traceReceiver) start(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Get("Traceparent"))
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (r *traceReceiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.headers...)
}

// runPipeline runs relay, router, dispatcher and attempt-log writer with
// tracer (each stage its own tracer from prov), an endpoint that opted in
// to traceparent, and commits one outbox row carrying appTraceparent. It
// returns once the attempt is in the attempt log.
func (e *env) runPipeline(t *testing.T, prov *tracing.Provider) *traceReceiver {
	t.Helper()
	ctx := context.Background()
	rcv := &traceReceiver{}
	_, err := e.db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_tp", Account: "acct_1", URL: rcv.start(t) + "/hook",
		Secrets: []string{endpoint.NewSecret()}, SendTraceparent: true})
	require.NoError(t, err)
	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: e.db.Store, Logger: e.logger})
	require.NoError(t, err)
	start(t, idx.Run)
	seeds := []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}

	rt, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: idx, KafkaOpts: seeds, Logger: e.logger,
		Tracer: prov.Tracer("hookd/router")})
	require.NoError(t, err)
	start(t, rt.Run)
	d, err := dispatcher.New(dispatcher.Config{Topics: e.tcfg, AllowPrivateNetworks: true, CommitInterval: 100 * time.Millisecond},
		dispatcher.Deps{Endpoints: dispatchIndex{idx}, KafkaOpts: seeds, Logger: e.logger, Tracer: prov.Tracer("hookd/dispatch")})
	require.NoError(t, err)
	start(t, func(ctx context.Context) error {
		if err := idx.WaitReady(ctx); err != nil {
			return nil
		}
		return d.Run(ctx)
	})
	w, err := attemptlog.New(attemptlog.Config{Topic: e.names.Attempts, DeliveriesTopic: e.names.Deliveries, OpsTopic: e.names.Ops,
		EventsTopic: e.names.Events}, attemptlog.Deps{Store: e.db.Store, Logger: e.logger, Registerer: prometheus.NewRegistry(),
		KafkaOpts: append(seeds, kgo.FetchMaxWait(200*time.Millisecond)), Tracer: prov.Tracer("hookd/attempt-log")})
	require.NoError(t, err)
	start(t, w.Run)
	rl, err := newTracedRelay(e, prov)
	require.NoError(t, err)
	start(t, rl.Run)
	e.waitStreaming(t)

	tx, err := e.db.Store.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: "evt_traced", Account: "acct_1", Type: "invoice.paid", Traceparent: appTraceparent})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	waitFor(t, "the attempt in the attempt log", 30*time.Second, func() bool {
		var n int
		err := e.db.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM webhooks.attempts WHERE event_id = 'evt_traced'`).Scan(&n)
		return err == nil && n == 1
	})
	return rcv
}

func newTracedRelay(e *env, prov *tracing.Provider) (*relay.Relay, error) {
	return relay.New(e.relayConfig(), relay.Deps{Store: e.db.Store, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)},
		Logger: e.logger, Registerer: prometheus.NewRegistry(), Tracer: prov.Tracer("hookd/relay")})
}

// dispatchIndex adapts the endpoint index to the dispatcher, as hookd does.
type dispatchIndex struct{ x *endpoint.Index }

func (a dispatchIndex) Endpoint(id string) (dispatcher.Target, bool) {
	ep, ok := a.x.Endpoint(id)
	return dispatcher.Target{ID: ep.ID, Account: ep.Account, URL: ep.URL, Secrets: ep.Secrets, Disabled: !ep.Active(),
		SendTraceparent: ep.SendTraceparent}, ok
}

// One event is one trace, continuing the application's: the outbox row's
// traceparent is the parent of the relay's publish span, whose child is
// the router's fan-out span, whose child is the dispatcher's HTTP client
// span, whose child is the attempt-log write span. The endpoint, opted in,
// receives the client span's traceparent.
func TestTraceFromOutboxRowToAttemptLog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	exp := tracetest.NewInMemoryExporter()
	prov := tracing.NewSync(exp)
	rcv := e.runPipeline(t, prov)

	var spans map[string]tracetest.SpanStub
	waitFor(t, "the attempt-log write span", 10*time.Second, func() bool {
		spans = map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			spans[s.Name] = s
		}
		_, ok := spans["write attempt log"]
		return ok
	})
	publish, fanout, post, write := spans["publish "+e.names.Events], spans["fan-out "+e.names.Events], spans["POST"], spans["write attempt log"]
	for name, s := range map[string]tracetest.SpanStub{"publish": publish, "fan-out": fanout, "POST": post, "write": write} {
		require.Equal(t, appTraceID, s.SpanContext.TraceID().String(), "%s span: not in the application's trace", name)
	}
	require.Equal(t, appSpanID, publish.Parent.SpanID().String(), "publish: the application's span is its parent")
	require.True(t, publish.Parent.IsRemote())
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind)
	require.Equal(t, publish.SpanContext.SpanID(), fanout.Parent.SpanID(), "fan-out: the publish span is its parent")
	require.Equal(t, fanout.SpanContext.SpanID(), post.Parent.SpanID(), "POST: the fan-out span is its parent")
	require.Equal(t, post.SpanContext.SpanID(), write.Parent.SpanID(), "write: the attempt's span is its parent")

	require.Equal(t, trace.SpanKindClient, post.SpanKind)
	attrs := attribute.NewSet(post.Attributes...)
	for k, want := range map[attribute.Key]any{"http.request.method": "POST", "http.response.status_code": int64(200),
		"server.address": "127.0.0.1", "hookd.event_id": "evt_traced", "hookd.endpoint_id": "ep_tp", "hookd.attempt": int64(1)} {
		v, ok := attrs.Value(k)
		require.True(t, ok, "POST span lacks %s", k)
		require.Equal(t, want, v.AsInterface(), "POST span %s", k)
	}
	u, _ := attrs.Value("url.full")
	require.True(t, strings.HasPrefix(u.AsString(), "http://127.0.0.1:") && strings.HasSuffix(u.AsString(), "/hook"), "url.full %q", u.AsString())
	require.Equal(t, codes.Unset, post.Status.Code)
	fanoutAttrs := attribute.NewSet(fanout.Attributes...)
	ids, _ := fanoutAttrs.Value("hookd.endpoint_ids")
	require.Equal(t, []string{"ep_tp"}, ids.AsStringSlice())

	got := rcv.got()
	require.Len(t, got, 1)
	require.Equal(t, tracing.Traceparent(post.SpanContext), got[0], "the receiver gets the attempt span's traceparent")
}

// With tracing off (hookd's default, a no-op tracer), no stage adds a
// traceparent: not to the events, deliveries or attempt records, not to
// the request of an endpoint that opted in, even for an outbox row that
// has one.
func TestNoTracingNoTraceparent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	events := collect(t, e.kafka, e.names.Events)
	deliveries := collect(t, e.kafka, e.names.Deliveries)
	attempts := collect(t, e.kafka, e.names.Attempts)
	rcv := e.runPipeline(t, tracing.Off)

	require.Equal(t, []string{""}, rcv.got(), "a request with a traceparent header")
	for topic, c := range map[string]*collector{"events": events, "deliveries": deliveries, "attempts": attempts} {
		waitFor(t, "a record on "+topic, 10*time.Second, func() bool { return c.len() > 0 })
		c.mu.Lock()
		for _, r := range c.recs {
			require.Empty(t, header(r, tracing.Header), "%s record with a traceparent header", topic)
		}
		c.mu.Unlock()
	}
}

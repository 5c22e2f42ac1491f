// Package router owns the fan-out stage: a consumer group on the events
// topic that validates each envelope, dead-letters the invalid ones with
// their reason and original bytes, and turns each valid event into one
// delivery record per subscribed endpoint of its account (disabled ones too:
// the dispatcher dead-letters those, so they can be resent) on the
// deliveries topic (key = endpoint id). Each batch (a poll, and what arrives
// within TransactionInterval of the previous transaction's start) is one
// Kafka transaction (franz-go's GroupTransactSession): its delivery records,
// dead letters, dedupe changelog records and the events-topic offsets are
// committed together or not at all, so a read_committed reader sees every
// event fanned out exactly once whatever crashes. An event repeated on the
// ingress topic (same account and id, same partition, within the dedupe
// window) is dropped and counted; the state that decides it is kept in a
// compacted changelog topic and read back when a partition is assigned
// (dedupe.go). Both ingress paths (the outbox relay and producers writing to
// the events topic) come through here. It never sends HTTP and never touches
// Postgres: the 'pending' delivery rows are written by the attempt-log
// writer from the deliveries topic, so a Postgres outage does not stop
// fan-out. An oversize envelope (or an invalid one in a record over the
// limit with its key and headers, whose summary keeps 512 bytes of its key)
// is dead-lettered as a summary (deadletter.SummaryRecord: size, limit, id,
// account and type when readable) rather than a copy: the copy plus the
// dead-letter headers could exceed the record limit and be refused forever,
// while the original stays readable at its origin offset. With Deps.Schemas
// (hookd --validate-event-schemas) it also checks each event's data against
// its type's JSON Schema from the event-type catalogue, held in memory, and
// dead-letters a mismatch as schema_violation.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/stage"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/producer/event"
)

// HeaderEnvelopeError is added to a dead-lettered envelope next to the
// deadletter headers: the envelope's rejection reason and detail, one line,
// e.g. "missing_type: type is missing". The reason alone is also in
// deadletter.HeaderErrorClass, and deadletter.HeaderReason is
// deadletter.ReasonInvalidEnvelope.
const HeaderEnvelopeError = "hookd-dlq-envelope-error"

// Matcher finds the endpoints an event fans out to; *endpoint.Index
// implements it.
type Matcher interface {
	// MatchEvent appends the endpoints of account subscribed to eventType,
	// disabled ones included, to dst; for an operational event (a "hookd."
	// type) it leaves out the endpoint data is about.
	MatchEvent(account, eventType string, data []byte, dst []*endpoint.Endpoint) []*endpoint.Endpoint
	// Ready is closed once the endpoints are loaded.
	Ready() <-chan struct{}
}

var _ Matcher = (*endpoint.Index)(nil)

// SchemaValidator checks an event's data against its type's JSON Schema;
// *eventtype.Catalog implements it from memory, never a query per event.
type SchemaValidator interface {
	// Validate returns nil for a valid event, or for a type without a
	// schema; else an error naming the first violation.
	Validate(eventType string, data []byte) error
	// WaitReady blocks until the schemas are loaded or ctx ends.
	WaitReady(ctx context.Context) error
}

var _ SchemaValidator = (*eventtype.Catalog)(nil)

// Config configures a Router.
type Config struct {
	// Topics names the events (consumed), deliveries and dead-letter
	// (produced) topics. Defaults to topics.NamesFor(topics.Config{}).
	Topics topics.Names
	// Group is the consumer group id. Defaults to "hookd-router".
	Group string
	// MaxEnvelopeBytes rejects larger envelopes as oversize; the relay's
	// MaxEnvelopeBytes should be the same. Between 1024 and
	// topics.MaxEnvelopeBytes (960 KiB). Defaults to 256 KiB
	// (event.DefaultMaxBytes).
	MaxEnvelopeBytes int
	// MaxPollRecords caps one batch. Defaults to 5000.
	MaxPollRecords int
	// RetryBackoff is the first pause before a batch whose transaction was
	// aborted (Kafka did not take it) is read and fanned out again, and
	// before a broken transactional session is restarted; both double up
	// to 30s. It is also the first pause after a poll that brought only
	// errors (doubling up to 5s). Defaults to 250ms.
	RetryBackoff time.Duration
	// DrainTimeout bounds finishing the batch in hand once shutdown has
	// started; before that the batch is retried for as long as Kafka is
	// unavailable. Defaults to 30s.
	DrainTimeout time.Duration
	// TransactionalID identifies this router's transactional producer. It
	// must be unique among the routers running at once (two sharing one
	// fence each other: each restarts its session, slowly but without a
	// duplicate) and should stay the same across a restart of the same
	// router, so that the restarted one aborts at once the transaction
	// the crashed one left open; otherwise that transaction holds back
	// read_committed readers of the partitions it wrote (and the group's
	// offsets) until TransactionTimeout. Zombie fencing itself does not
	// depend on it: the group generation fences a router that lost its
	// partitions (KIP-447). Defaults to Group + "-" + the host name.
	TransactionalID string
	// TransactionTimeout is how long Kafka lets a transaction stay open
	// before aborting it: the longest a crashed router's open transaction
	// holds back readers when the restarted router has another
	// TransactionalID. It must exceed the time to fan out one batch; at
	// most the broker's transaction.max.timeout.ms. Defaults to 30s.
	TransactionTimeout time.Duration
	// TransactionInterval is the least time between the starts of two
	// transactions: a batch smaller than MaxPollRecords keeps polling
	// until TransactionInterval after the previous transaction began, and
	// what arrives meanwhile joins it. Each transaction costs Kafka about
	// five requests and a marker on every partition it wrote, and wakes
	// every read_committed reader of those partitions; at a few thousand
	// events a second, starting one per poll made a large share of the
	// embedded broker's requests and lengthened every other stage's tail.
	// It adds up to TransactionInterval to the route stage. Between 0 and
	// 1s; negative starts each transaction as soon as the previous one
	// ends. Defaults to 20ms (hookbench at 3,000 deliveries/s:
	// commit-to-receiver p99 median 117 ms in four runs against 224 in
	// seven without, the p50 unchanged).
	TransactionInterval time.Duration
	// DedupeWindow is how long an event (account and id) is remembered
	// after it was fanned out: a repeat whose record timestamp is within
	// DedupeWindow of the first one's, read from the same events
	// partition, is dropped and counted. Between 1m and 168h (the dedupe
	// changelog keeps 7 days by default). Defaults to 1h.
	DedupeWindow time.Duration
	// DedupeMaxKeys caps the events remembered per events partition
	// (about 80 bytes each): beyond it the oldest are forgotten first, so
	// the window is shorter when more than DedupeMaxKeys events arrive
	// on a partition within DedupeWindow. At least 1000. Defaults to
	// 50000.
	DedupeMaxKeys int
}

func (c *Config) setDefaults() {
	if c.Topics.Events == "" && c.Topics.Deliveries == "" && c.Topics.DLQ == "" {
		c.Topics = topics.NamesFor(topics.Config{})
	}
	if c.Group == "" {
		c.Group = "hookd-router"
	}
	if c.MaxEnvelopeBytes == 0 {
		c.MaxEnvelopeBytes = event.DefaultMaxBytes
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 5000
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 250 * time.Millisecond
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.TransactionalID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "localhost"
		}
		c.TransactionalID = c.Group + "-" + host
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 30 * time.Second
	}
	if c.TransactionInterval == 0 {
		c.TransactionInterval = 20 * time.Millisecond
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = time.Hour
	}
	if c.DedupeMaxKeys == 0 {
		c.DedupeMaxKeys = 50000
	}
}

func (c *Config) validate() error {
	switch {
	case c.Topics.Events == "":
		return errors.New("router events topic: must be set")
	case c.Topics.Deliveries == "":
		return errors.New("router deliveries topic: must be set")
	case c.Topics.DLQ == "":
		return errors.New("router dlq topic: must be set")
	case c.MaxEnvelopeBytes < 1024 || c.MaxEnvelopeBytes > topics.MaxEnvelopeBytes:
		return fmt.Errorf("router max envelope bytes: must be between 1024 and %d, got %d", topics.MaxEnvelopeBytes, c.MaxEnvelopeBytes)
	case c.MaxPollRecords < 1:
		return fmt.Errorf("router max poll records: must be at least 1, got %d", c.MaxPollRecords)
	case c.RetryBackoff < time.Millisecond:
		return fmt.Errorf("router retry backoff: must be at least 1ms, got %s", c.RetryBackoff)
	case c.DrainTimeout < time.Second:
		return fmt.Errorf("router drain timeout: must be at least 1s, got %s", c.DrainTimeout)
	case c.Topics.Dedupe == "":
		return errors.New("router dedupe topic: must be set")
	case c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute:
		return fmt.Errorf("router transaction timeout: must be between 1s and 15m, got %s", c.TransactionTimeout)
	case c.TransactionInterval > time.Second:
		return fmt.Errorf("router transaction interval: must be at most 1s, got %s", c.TransactionInterval)
	case c.DedupeWindow < time.Minute || c.DedupeWindow > MaxDedupeWindow:
		return fmt.Errorf("router dedupe window: must be between 1m and %s, got %s", MaxDedupeWindow, c.DedupeWindow)
	case c.DedupeMaxKeys < 1000:
		return fmt.Errorf("router dedupe max keys: must be at least 1000, got %d", c.DedupeMaxKeys)
	}
	return nil
}

// MaxDedupeWindow is the longest DedupeWindow: the dedupe changelog's
// default retention (topics.Config.Retention).
const MaxDedupeWindow = 7 * 24 * time.Hour

// Deps are the Router's collaborators.
type Deps struct {
	// Endpoints is required.
	Endpoints Matcher
	// Schemas, when set, validates every event's data against its type's
	// schema in the event-type catalogue: an event that does not match is
	// dead-lettered with reason schema_violation. Nil (the default)
	// validates nothing.
	Schemas SchemaValidator
	// KafkaOpts are the shared client options (seed brokers, logging,
	// metrics); the router adds its consumer group options.
	KafkaOpts []kgo.Opt
	// ChangelogKafkaOpts are the options of the short-lived clients that
	// read the dedupe changelog back. They must not carry a hook that
	// keeps one client's state (a kprom metrics hook given to KafkaOpts:
	// a second client sharing it races with the first). Defaults to
	// KafkaOpts.
	ChangelogKafkaOpts []kgo.Opt
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the router metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Tracer, when tracing is on, gets a fan-out span per event fanned
	// out, a child of the event record's traceparent header (the relay's
	// publish span, or an application's); its context goes in the
	// traceparent header of each delivery record. Nil or a no-op tracer:
	// no span, no header.
	Tracer trace.Tracer
}

// Router is the fan-out stage.
type Router struct {
	cfg    Config
	deps   Deps
	logger *slog.Logger
	m      metrics
	stage  *prometheus.HistogramVec
	dd     *dedupe
	tracer trace.Tracer // nil when tracing is off
}

type metrics struct {
	events     *prometheus.CounterVec
	invalid    *prometheus.CounterVec
	deliveries prometheus.Counter
	duplicates prometheus.Counter
	filtered   prometheus.Counter
	aborts     prometheus.Counter
	retries    *prometheus.CounterVec
	batch      prometheus.Histogram
}

// New validates cfg and returns a Router; Run starts it.
func New(cfg Config, deps Deps) (*Router, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Endpoints == nil {
		return nil, errors.New("router: no endpoint index")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	r := &Router{cfg: cfg, deps: deps, logger: deps.Logger, tracer: tracing.Active(deps.Tracer)}
	loaderOpts := deps.ChangelogKafkaOpts
	if loaderOpts == nil {
		loaderOpts = deps.KafkaOpts
	}
	r.dd = &dedupe{topic: cfg.Topics.Dedupe, window: cfg.DedupeWindow, maxKeys: cfg.DedupeMaxKeys, hash: newHasher(),
		opts: append(slices.Clip(loaderOpts), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
			kgo.FetchMaxWait(200*time.Millisecond))}
	r.m = metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_events_total",
			Help: "Events read by the router, by result: fanned_out, no_match (no subscribed endpoint), filtered (every subscribed endpoint's payload filter refused it) or invalid (dead-lettered)."},
			[]string{"result"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_invalid_events_total",
			Help: "Envelopes dead-lettered by the router, by reason."}, []string{"reason"}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_router_deliveries_total",
			Help: "Delivery records produced by the router (one per event and subscribed endpoint)."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_router_duplicate_events_total",
			Help: "Events dropped by the router as repeats (same account and id, same events partition) of one fanned out within the dedupe window."}),
		filtered: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_router_filtered_deliveries_total",
			Help: "Deliveries not made because the subscribed endpoint's payload filter refused the event (one per event and endpoint)."}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_router_aborted_transactions_total",
			Help: "Router transactions aborted (a failed produce, a rebalance, a refused offset commit); their batch is fanned out again."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_write_retries_total",
			Help: "Batches Kafka did not take, aborted to be fanned out again, by target (kafka: the router writes nowhere else)."}, []string{"target"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hookd_router_batch_seconds",
			Help: "Time to fan out one polled batch, from poll until its transaction (records, offsets, dedupe changelog) is committed.", Buckets: prometheus.DefBuckets}),
	}
	for _, res := range []string{"fanned_out", "no_match", "filtered", "invalid"} {
		r.m.events.WithLabelValues(res)
	}
	var err error
	if r.stage, err = stage.Histogram(deps.Registerer); err != nil {
		return nil, fmt.Errorf("router metrics: %w", err)
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{r.m.events, r.m.invalid, r.m.deliveries, r.m.duplicates, r.m.filtered, r.m.aborts, r.m.retries, r.m.batch} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("router metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Name names the role.
func (r *Router) Name() string { return "router" }

// Run waits for the endpoint index, joins the consumer group and fans out
// until ctx ends; then it finishes the batch in hand (within DrainTimeout),
// leaves the group and returns nil. Each polled batch is fanned out in one
// Kafka transaction with its offsets and dedupe changelog records
// (exactly once to read_committed readers). It waits out Kafka being
// unreachable, however long: a batch Kafka does not take is aborted and
// fanned out again, fetch errors are retried, each kind with one WARN per
// outage. Only a permanent error (kafkaconn.Permanent: authentication,
// authorization, an unknown topic, a record Kafka can never take) ends it
// early, with that error.
func (r *Router) Run(ctx context.Context) error {
	select {
	case <-r.deps.Endpoints.Ready():
	case <-ctx.Done():
		return nil
	}
	if r.deps.Schemas != nil && r.deps.Schemas.WaitReady(ctx) != nil {
		return nil // ctx ended
	}
	backoff := r.cfg.RetryBackoff
	for {
		start := time.Now()
		err := r.session(ctx)
		if !errors.Is(err, errRestart) || ctx.Err() != nil {
			return err
		}
		if time.Since(start) > time.Minute { // a session that worked a while: a new trouble
			backoff = r.cfg.RetryBackoff
		}
		r.logger.WarnContext(ctx, "router restarting its Kafka session; the batch in hand is read again", "error", err.Error(),
			"transactional_id", r.cfg.TransactionalID)
		pause(ctx, backoff)
		backoff = min(2*backoff, 30*time.Second)
	}
}

// session runs one transactional consumer-group session until ctx ends, a
// permanent error, or errRestart.
func (r *Router) session(ctx context.Context) error {
	opts := append([]kgo.Opt{}, r.deps.KafkaOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics.Events),
		// Events an application's transaction rolled back are not events.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.TransactionalID(r.cfg.TransactionalID),
		kgo.TransactionTimeout(r.cfg.TransactionTimeout),
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordPartitioner(changelogPartitioner{topic: r.cfg.Topics.Dedupe, rest: kgo.UniformBytesPartitioner(64<<10, true, true, nil)}),
		kgo.OnPartitionsRevoked(r.dd.drop),
		kgo.OnPartitionsLost(r.dd.drop),
	)
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("router kafka client: %w", err)
	}
	defer s.Close()
	if err := r.claim(ctx, s.Client()); err != nil {
		return err
	}
	r.logger.InfoContext(ctx, "router consuming", "topic", r.cfg.Topics.Events, "group", r.cfg.Group, "transactional_id", r.cfg.TransactionalID)
	// Whatever the partitions were, a new session reads their state back.
	r.dd.reset()

	l := r.newLoop(s)
	var began time.Time
	for {
		fetches := s.PollRecords(ctx, r.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			return nil
		}
		err := l.fetchErrors(ctx, fetches)
		recs := fetches.Records()
		if err == nil {
			recs, err = l.gather(ctx, recs, began.Add(r.cfg.TransactionInterval))
		}
		if err == nil {
			began = time.Now()
			err = l.route(ctx, recs)
		}
		s.AllowRebalance()
		switch {
		case err != nil && ctx.Err() != nil:
			r.logger.WarnContext(ctx, "router stopped with a batch not committed; it will be read again", "records", len(recs), "error", err.Error())
			return nil
		case err != nil:
			return err
		case ctx.Err() != nil:
			return nil
		}
	}
}

// claim initializes the transactional producer before the first poll:
// its InitProducerID aborts at once the transaction a crashed router with
// the same TransactionalID left open, which the group's offset fetch
// (RequireStable) would otherwise wait on until TransactionTimeout.
func (r *Router) claim(ctx context.Context, cl *kgo.Client) error {
	if err := cl.BeginTransaction(); err != nil {
		if kafkaconn.Permanent(err) { // e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED
			return fmt.Errorf("initializing transactional id %s: %w", r.cfg.TransactionalID, err)
		}
		return fmt.Errorf("initializing transactional id %s: %w: %w", r.cfg.TransactionalID, err, errRestart)
	}
	// Nothing was produced: no EndTxn is sent.
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("ending the empty first transaction: %w: %w", err, errRestart)
	}
	return nil
}

// changelogPartitioner writes a dedupe changelog record to the partition
// it names (that of the events partition it stands for) and partitions
// every other record like kgo's default, on which the deliveries topic's
// key -> partition mapping relies.
type changelogPartitioner struct {
	topic string
	rest  kgo.Partitioner
}

func (p changelogPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	if t == p.topic {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return p.rest.ForTopic(t)
}

// batch is the reusable scratch space of one polled batch.
type batch struct {
	out     []*kgo.Record
	matches []*endpoint.Endpoint
	pending pending
	// routed are the timestamps of the events fanned out, observed as
	// stage.Route once their transaction commits.
	routed []time.Time
	// spans are the fan-out spans of the batch (tracing on), ended once
	// its transaction committed or failed.
	spans []trace.Span
}

// handled is what a batch did, counted once its transaction commits.
type handled struct {
	fanned, noMatch, invalid, duplicates, deliveries float64
	// filtered counts the events every matched endpoint's payload filter
	// refused; filteredDeliveries the (event, endpoint) pairs refused.
	filtered, filteredDeliveries float64
	invalidReasons               []string
	routed                       []time.Time
	pending                      *pending
	// produceErr is the last error of the records Kafka did not take
	// (a permanent one if any), nil if it took them all.
	produceErr error
}

// handle fans out recs into the open transaction and waits for every
// output record's ack. Its error is one that ends the batch before
// anything is produced (the dedupe state could not be read back, wrapped
// errDedupeState); a produce failure is in handled.produceErr.
func (r *Router) handle(ctx context.Context, l *loop, recs []*kgo.Record) (handled, error) {
	b := &l.b
	b.out, b.routed = b.out[:0], b.routed[:0]
	b.pending.reset()
	res := handled{pending: &b.pending}
	states, err := r.dd.state(ctx, recs)
	if err != nil {
		return res, fmt.Errorf("%w: %w", errDedupeState, err)
	}
	for _, rec := range recs {
		env, err := event.Parse(rec.Value, event.Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp},
			r.cfg.MaxEnvelopeBytes)
		var body []byte
		if err == nil {
			body, err = delivery.EventBody(env)
			if err != nil {
				err = &event.InvalidError{Reason: event.ReasonInvalidData, Detail: err.Error()}
			}
		}
		if err == nil {
			err = r.checkSchema(env)
		}
		if err != nil {
			dl, reason := r.deadLetter(rec, err)
			b.out = append(b.out, dl)
			res.invalidReasons = append(res.invalidReasons, reason)
			res.invalid++
			continue
		}
		key := dedupeKey(env.Account, env.ID)
		if r.dd.check(&b.pending, states[rec.Partition], rec.Partition, key, rec.Timestamp) {
			res.duplicates++
			r.logger.InfoContext(ctx, "duplicate event dropped", "event_id", env.ID, "account", env.Account,
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
			continue
		}
		b.out = append(b.out, r.dd.record(rec.Partition, key, rec.Timestamp, rec.Offset))
		b.matches = r.deps.Endpoints.MatchEvent(env.Account, env.Type, env.Data, b.matches[:0])
		subscribed := len(b.matches)
		var left int
		b.matches, left = applyFilters(&env, b.matches)
		res.filteredDeliveries += float64(left)
		if subscribed > 0 && len(b.matches) == 0 {
			res.filtered++
			continue
		}
		if len(b.matches) == 0 {
			res.noMatch++
			r.logger.InfoContext(ctx, "event matched no endpoint", "event_id", env.ID, "account", env.Account, "event_type", env.Type,
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
			continue
		}
		res.fanned++
		b.routed = append(b.routed, rec.Timestamp)
		tp, ts := r.trace(ctx, b, rec, env)
		for _, ep := range b.matches {
			d := delivery.Delivery{
				ID: delivery.ID(env.ID, ep.ID), EventID: env.ID, EventType: env.Type, EndpointID: ep.ID,
				Account: env.Account, EventCreated: env.Created, Attempt: 1, Body: body, Traceparent: tp, Tracestate: ts,
			}
			b.out = append(b.out, d.Record(r.cfg.Topics.Deliveries))
			res.deliveries++
		}
	}
	res.routed = b.routed
	res.produceErr = r.produceOnce(ctx, l, b.out)
	return res, nil
}

// checkSchema validates env's data against its type's schema when schema
// validation is on; absent data is validated as null.
func (r *Router) checkSchema(env event.Envelope) error {
	if r.deps.Schemas == nil {
		return nil
	}
	data := env.Data
	if len(data) == 0 {
		data = []byte("null")
	}
	if err := r.deps.Schemas.Validate(env.Type, data); err != nil {
		return &event.InvalidError{Reason: event.ReasonSchemaViolation, Detail: err.Error()}
	}
	return nil
}

// committed counts a batch whose transaction committed and makes its
// events part of the dedupe state.
func (r *Router) committed(res handled) {
	r.dd.commit(res.pending)
	for _, ts := range res.routed {
		stage.Since(r.stage, stage.Route, ts)
	}
	r.m.events.WithLabelValues("fanned_out").Add(res.fanned)
	r.m.events.WithLabelValues("no_match").Add(res.noMatch)
	r.m.events.WithLabelValues("filtered").Add(res.filtered)
	r.m.filtered.Add(res.filteredDeliveries)
	r.m.events.WithLabelValues("invalid").Add(res.invalid)
	for _, reason := range res.invalidReasons {
		r.m.invalid.WithLabelValues(reason).Inc()
	}
	r.m.duplicates.Add(res.duplicates)
	r.m.deliveries.Add(res.deliveries)
}

// deadLetter returns the dead letter of an invalid envelope, and its
// reason (counted once the transaction commits).
func (r *Router) deadLetter(rec *kgo.Record, err error) (*kgo.Record, string) {
	reason, detail := "invalid_envelope", err.Error()
	var ie *event.InvalidError
	if errors.As(err, &ie) {
		reason = string(ie.Reason)
	}
	r.logger.Warn("invalid event envelope dead-lettered", "reason", reason, "detail", detail,
		"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
	p := deadletter.Provenance{
		OriginTopic: rec.Topic, OriginPartition: rec.Partition, OriginOffset: rec.Offset,
		ErrorClass: reason, Reason: deadletter.ReasonInvalidEnvelope, DeadAt: time.Now(),
	}
	var dl *kgo.Record
	if reason == string(event.ReasonOversize) || recordBytes(rec) > r.cfg.MaxEnvelopeBytes {
		// A copy of a record this large (a huge key, say) could exceed the
		// record limit with the dead-letter headers added, and be refused
		// forever: a summary, with the key clipped.
		dl = deadletter.SummaryRecord(r.cfg.Topics.DLQ, rec.Key[:min(len(rec.Key), maxSummaryKey)],
			oversizeSummary(rec.Value, r.cfg.MaxEnvelopeBytes, detail), p)
	} else {
		dl = deadletter.Record(r.cfg.Topics.DLQ, rec, p)
	}
	dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: HeaderEnvelopeError, Value: []byte(detail)})
	return dl, reason
}

// maxSummaryKey bounds the key a summary dead letter keeps.
const maxSummaryKey = 512

// recordBytes is the size of rec's key, value and headers.
func recordBytes(rec *kgo.Record) int {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// oversizeSummary describes an oversize envelope: its size, the limit, and
// its id, account and type if it is a JSON object that has them.
func oversizeSummary(value []byte, limit int, detail string) deadletter.Summary {
	var head struct {
		ID      any `json:"id"`
		Account any `json:"account"`
		Type    any `json:"type"`
	}
	_ = json.Unmarshal(value, &head) // best effort: the summary stands without them
	str := func(v any) string { s, _ := v.(string); return s }
	return deadletter.Summary{EventID: str(head.ID), Account: str(head.Account), EventType: str(head.Type),
		Size: len(value), Limit: limit, Detail: detail}
}

// produceOnce produces recs into the open transaction and returns the
// last error of those Kafka did not take (a permanent one if any), nil
// when it acknowledged them all. kgo itself retries a produce Kafka can
// take later (no leader, timed out, broker unreachable) without a limit;
// acks still missing after stallAfter count as a produce failure (one
// WARN), since kgo retries an unreachable broker silently.
func (r *Router) produceOnce(ctx context.Context, l *loop, recs []*kgo.Record) error {
	var (
		mu   sync.Mutex
		last error
		wg   sync.WaitGroup
	)
	wg.Add(len(recs))
	for _, rec := range recs {
		l.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if last == nil || !kafkaconn.Permanent(last) {
					last = fmt.Errorf("producing to %s: %w", rec.Topic, err)
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	acked := make(chan struct{})
	go func() {
		// The batch is complete: send it now rather than after the
		// client's linger.
		_ = l.cl.Flush(ctx)
		wg.Wait()
		close(acked)
	}()
	stalled := time.NewTimer(stallAfter)
	defer stalled.Stop()
	select {
	case <-acked:
	case <-stalled.C:
		l.produce.fail(ctx, fmt.Errorf("%d records not acknowledged after %s", len(recs), stallAfter))
		<-acked
	}
	if last == nil {
		l.produce.ok(ctx)
	}
	return last
}

// stallAfter is how long a batch waits for Kafka's acks before the wait
// is reported.
const stallAfter = 10 * time.Second

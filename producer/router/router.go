// Package router owns the fan-out stage: a consumer group on the events
// topic that validates each envelope, dead-letters the invalid ones with
// their reason and original bytes, and turns each valid event into one
// delivery record per subscribed endpoint of its account (disabled ones
// too: the dispatcher dead-letters those, so they can be resent) on the
// deliveries topic (key = endpoint id). Offsets are committed only once
// every record of the batch is acknowledged by Kafka. Both ingress paths
// (the outbox relay and producers writing to the events topic) come through
// here. It never sends HTTP and never touches Postgres: the 'pending'
// delivery rows are written by the attempt-log writer from the deliveries
// topic, so a Postgres outage does not stop fan-out. An oversize envelope
// (or an invalid one in a record over the limit with its key and headers,
// whose summary keeps 512 bytes of its key) is dead-lettered as a summary
// (deadletter.SummaryRecord: size, limit, id, account and type when
// readable) rather than a copy: the copy plus the dead-letter headers could
// exceed the record limit and be refused forever, while the original stays
// readable at its origin offset.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/stage"
	"github.com/hookd/hookd/internal/topics"
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
	// RetryBackoff is the first pause before re-trying a failed write of a
	// batch to Kafka; it doubles up to 30s. It is also the first pause after
	// a poll that brought only errors (doubling up to 5s) and the interval
	// at which an owed offset commit is retried. Defaults to 250ms.
	RetryBackoff time.Duration
	// DrainTimeout bounds finishing the batch in hand once shutdown has
	// started; before that the batch is retried for as long as Kafka is
	// unavailable. Defaults to 30s.
	DrainTimeout time.Duration
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
	}
	return nil
}

// Deps are the Router's collaborators.
type Deps struct {
	// Endpoints is required.
	Endpoints Matcher
	// KafkaOpts are the shared client options (seed brokers, logging,
	// metrics); the router adds its consumer group options.
	KafkaOpts []kgo.Opt
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the router metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Router is the fan-out stage.
type Router struct {
	cfg    Config
	deps   Deps
	logger *slog.Logger
	m      metrics
	stage  *prometheus.HistogramVec
	// acked is true while every record polled is acknowledged by Kafka
	// (false from the poll of a batch until its acks), so that a
	// revocation may commit them.
	acked atomic.Bool
}

type metrics struct {
	events     *prometheus.CounterVec
	invalid    *prometheus.CounterVec
	deliveries prometheus.Counter
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
	r := &Router{cfg: cfg, deps: deps, logger: deps.Logger}
	r.acked.Store(true)
	r.m = metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_events_total",
			Help: "Events read by the router, by result: fanned_out, no_match (no subscribed endpoint) or invalid (dead-lettered)."},
			[]string{"result"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_invalid_events_total",
			Help: "Envelopes dead-lettered by the router, by reason."}, []string{"reason"}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_router_deliveries_total",
			Help: "Delivery records produced by the router (one per event and subscribed endpoint)."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_router_write_retries_total",
			Help: "Retried writes of a batch, by target (kafka: the router writes nowhere else)."}, []string{"target"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hookd_router_batch_seconds",
			Help: "Time to fan out one polled batch, from poll until its records are acknowledged and its offset commit is started (not waited for).", Buckets: prometheus.DefBuckets}),
	}
	for _, res := range []string{"fanned_out", "no_match", "invalid"} {
		r.m.events.WithLabelValues(res)
	}
	var err error
	if r.stage, err = stage.Histogram(deps.Registerer); err != nil {
		return nil, fmt.Errorf("router metrics: %w", err)
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{r.m.events, r.m.invalid, r.m.deliveries, r.m.retries, r.m.batch} {
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
// commits, leaves the group and returns nil. It waits out Kafka being
// unreachable, however long: the batch in hand is retried until Kafka
// acknowledges it, fetch and commit errors are retried, each kind with one
// WARN per outage. Only a permanent error (kafkaconn.Permanent:
// authentication, authorization, an unknown topic, a record Kafka can
// never take) ends it early, with that error.
func (r *Router) Run(ctx context.Context) error {
	select {
	case <-r.deps.Endpoints.Ready():
	case <-ctx.Done():
		return nil
	}
	opts := append([]kgo.Opt{}, r.deps.KafkaOpts...)
	opts = append(opts,
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Topics.Events),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(r.revoked),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("router kafka client: %w", err)
	}
	defer cl.Close()
	r.logger.InfoContext(ctx, "router consuming", "topic", r.cfg.Topics.Events, "group", r.cfg.Group)

	l := r.newLoop(ctx, cl)
	defer l.close(ctx)
	for {
		fetches := l.poll(ctx)
		if fetches.IsClientClosed() {
			return nil
		}
		if !fetches.Empty() {
			r.acked.Store(false)
		}
		err := l.fetchErrors(ctx, fetches)
		if err == nil {
			err = l.route(ctx, fetches.Records())
		}
		cl.AllowRebalance()
		switch {
		case err != nil && ctx.Err() != nil:
			r.logger.WarnContext(ctx, "router stopped with a batch unwritten; it will be read again", "records", len(fetches.Records()), "error", err.Error())
			return nil
		case err != nil:
			return err
		case ctx.Err() != nil:
			return nil
		}
	}
}

// batch is the reusable scratch space of one polled batch.
type batch struct {
	out     []*kgo.Record
	matches []*endpoint.Endpoint
	// routed are the timestamps of the events fanned out, observed as
	// stage.Route once their deliveries are acked.
	routed []time.Time
}

// handle fans out recs and returns once every output record is acked. It
// retries failed writes until they succeed, a permanent error, or ctx (the
// work context: DrainTimeout after shutdown starts) ends.
func (r *Router) handle(ctx context.Context, l *loop, recs []*kgo.Record) error {
	b := &l.b
	b.out, b.routed = b.out[:0], b.routed[:0]
	var fanned, noMatch, invalid, deliveries float64
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
		if err != nil {
			b.out = append(b.out, r.deadLetter(rec, err))
			invalid++
			continue
		}
		b.matches = r.deps.Endpoints.MatchEvent(env.Account, env.Type, env.Data, b.matches[:0])
		if len(b.matches) == 0 {
			noMatch++
			r.logger.InfoContext(ctx, "event matched no endpoint", "event_id", env.ID, "account", env.Account, "event_type", env.Type,
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
			continue
		}
		fanned++
		b.routed = append(b.routed, rec.Timestamp)
		for _, ep := range b.matches {
			d := delivery.Delivery{
				ID: delivery.ID(env.ID, ep.ID), EventID: env.ID, EventType: env.Type, EndpointID: ep.ID,
				Account: env.Account, EventCreated: env.Created, Attempt: 1, Body: body,
			}
			b.out = append(b.out, d.Record(r.cfg.Topics.Deliveries))
			deliveries++
		}
	}

	if err := r.produceAll(ctx, l, b.out); err != nil {
		return err
	}
	for _, ts := range b.routed {
		stage.Since(r.stage, stage.Route, ts)
	}
	r.m.events.WithLabelValues("fanned_out").Add(fanned)
	r.m.events.WithLabelValues("no_match").Add(noMatch)
	r.m.events.WithLabelValues("invalid").Add(invalid)
	r.m.deliveries.Add(deliveries)
	return nil
}

func (r *Router) deadLetter(rec *kgo.Record, err error) *kgo.Record {
	reason, detail := "invalid_envelope", err.Error()
	var ie *event.InvalidError
	if errors.As(err, &ie) {
		reason = string(ie.Reason)
	}
	r.m.invalid.WithLabelValues(reason).Inc()
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
	return dl
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

// produceAll produces recs and waits for every ack, re-producing the
// failed ones with backoff until they are acked, one of them fails
// permanently, or ctx ends. kgo itself retries a produce Kafka can take
// later (no leader, timed out, broker unreachable) without a limit.
func (r *Router) produceAll(ctx context.Context, l *loop, recs []*kgo.Record) error {
	pending := recs
	backoff := r.cfg.RetryBackoff
	for {
		failed, last := r.produceOnce(ctx, l, pending)
		if len(failed) == 0 {
			l.produce.ok(ctx)
			return nil
		}
		if kafkaconn.Permanent(last) {
			return fmt.Errorf("producing to %s: %w", failed[0].Topic, last)
		}
		r.m.retries.WithLabelValues("kafka").Inc()
		l.produce.fail(ctx, fmt.Errorf("%d records: %w", len(failed), last))
		pause(ctx, backoff)
		if ctx.Err() != nil {
			return fmt.Errorf("producing %d records: %w (last error: %v)", len(failed), context.Cause(ctx), last)
		}
		backoff = min(2*backoff, 30*time.Second)
		pending = failed
	}
}

// produceOnce produces recs and returns the ones that failed, with the
// last error (a permanent one if any failed permanently). Acks still
// missing after stallAfter count as a produce failure (one WARN), since
// kgo retries an unreachable broker silently.
func (r *Router) produceOnce(ctx context.Context, l *loop, recs []*kgo.Record) ([]*kgo.Record, error) {
	var (
		mu     sync.Mutex
		failed []*kgo.Record
		last   error
		wg     sync.WaitGroup
	)
	wg.Add(len(recs))
	for _, rec := range recs {
		l.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, rec)
				if last == nil || !kafkaconn.Permanent(last) {
					last = err
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
	return failed, last
}

// stallAfter is how long a batch waits for Kafka's acks before the wait
// is reported.
const stallAfter = 10 * time.Second

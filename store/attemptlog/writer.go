// Package attemptlog owns the durable attempt log: the writer role that
// consumes attempt records from the attempts topic and appends them to
// Postgres in batches (moving delivery state and endpoint health on in the
// same transaction, and staging the batch's deltas of the hourly chart
// rollup, which it folds into the rollup every few seconds: fold.go), and
// writes the 'pending' row of every record on the deliveries topic (so the
// router never waits on Postgres), with the record's topic, partition and
// offset (where the portal and the API read the delivery's payload). The
// partition maintainer is in package maintenance.
//
// The writer commits Kafka offsets only after the Postgres transaction has
// committed, so a crash or a Postgres outage loses nothing: unwritten records
// stay in Kafka and are read again. While Postgres is down the writer stops
// polling (memory stays bounded by one batch, Config.MaxBatchBytes, and one
// fetch) and retries the same batch with backoff; dispatchers keep producing
// to Kafka unaffected. While Kafka fails (the broker unreachable, fetch
// errors, failed offset commits) the writer waits it out: kgo retries and
// rejoins the group, the offsets of written records stay marked until a commit
// (the next batch's, or the autocommit every second) succeeds, and the outage
// is logged once, a WARN when it starts and an INFO when it ends. Writes are
// idempotent, so records read twice change nothing. A delivery record is held
// until its first attempt is read (Config.Hold), and the two are written in
// one transaction, the row inserted once in its final state; offsets are
// committed short of the records still held. A record whose account
// (hookd-account) is not the account of the endpoint id it names, or of the
// delivery row with its id, is logged under its own account with one WARN, and never
// moves another account's state: no endpoint health, no delivery row but its
// own, and its own only to dead (never delivered on the word of another
// account's receiver). It never makes delivery decisions and never sends HTTP.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package attemptlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/hookd/hookd/internal/clock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/maintenance"
)

// DefaultGroup is the consumer group of the attempt-log writers.
const DefaultGroup = "hookd-attempt-log"

// Config configures the Writer.
type Config struct {
	// Topic is the attempts topic. Defaults to "webhooks.attempts".
	Topic string
	// DeliveriesTopic is read too: each record on it (a fan-out or a
	// replay) gets its 'pending' row in webhooks.deliveries, so the router
	// never waits on Postgres. Defaults to "webhooks.deliveries".
	DeliveriesTopic string
	// OpsTopic receives endpoint.disabled events. Defaults to "webhooks.ops".
	OpsTopic string
	// EventsTopic receives the hookd.endpoint.disabled owner alert of an
	// endpoint the writer disables. Defaults to "webhooks.events".
	EventsTopic string
	// PortalBaseURL prefixes the alerts' portal links; empty gives paths.
	// Defaults to "".
	PortalBaseURL string
	// Group is the consumer group; writers of one group share the
	// partitions. Defaults to "hookd-attempt-log".
	Group string
	// MaxBatch caps the Kafka records (delivery and attempt records
	// together) gathered into one batch; held delivery records released by
	// the batch join its transaction too. Defaults to 5000: Postgres's
	// write time per row falls with the batch's size (the statements' fixed
	// cost, the commit), and at 1000 a batch held ~430 attempts at
	// saturation (issue 15: docs/benchmarks.md). Below ~20,000 records/s
	// (~10,000 deliveries/s) BatchWait ends a batch first.
	MaxBatch int
	// MaxBatchBytes caps the record values gathered into one batch, so that
	// large payloads (a delivery record carries the webhook's body, up to
	// 256 KiB) do not make a batch of MaxBatch records hundreds of MiB: the
	// batch in hand is kept through a Postgres outage. A batch ends at the
	// first poll that reaches it. Defaults to 32 MiB.
	MaxBatchBytes int
	// BatchWait is how long the writer goes on gathering records into a
	// batch (up to MaxBatch) after the first. It delays the delivery log by
	// as much. Defaults to 250ms; a negative value writes every poll at
	// once.
	BatchWait time.Duration
	// Hold is how long a delivery record waits for its first attempt
	// before its 'pending' row is written: while the writer is behind on
	// the attempts topic, until it has read first attempts of events
	// created Hold after the delivery's event; while it keeps up, Hold on
	// the wall clock. A delivery record and its attempt are thus written
	// together, the row inserted once in its final state, however far
	// behind the writer and the dispatchers are, while a delivery whose
	// first attempt is slow (a hanging endpoint, a paused one) shows as
	// pending after Hold. Defaults to 5s; a negative value writes pending
	// rows at once.
	Hold time.Duration
	// MaxHold bounds, on the wall clock, how long a delivery record is
	// held. Defaults to 60s.
	MaxHold time.Duration
	// MaxHeld is how many delivery records may be held at once; at that
	// count (checked once per batch, so it may be passed by up to one
	// batch) the writer stops reading the deliveries topic until half of
	// them are released (their attempts read). A held record costs about
	// 300 bytes. Defaults to 50000.
	MaxHeld int
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled (--disable-after). Defaults to 72h; at least 1m.
	DisableAfter time.Duration
	// RetryMin is the first wait after a failed Postgres write; it doubles
	// up to RetryMax. Defaults to 100ms.
	RetryMin time.Duration
	// RetryMax caps the wait between two tries of a batch. Defaults to 5s.
	RetryMax time.Duration
	// WriteTimeout bounds one try of a batch, so that a Postgres that hangs
	// (a lock held, a network partition) counts as down and is retried
	// rather than waited on forever. Defaults to 30s.
	WriteTimeout time.Duration
	// DrainTimeout bounds, once Run's context ends, how long the batch in
	// hand may still take to be written and committed; records not written
	// by then are left uncommitted in Kafka. Defaults to 10s.
	DrainTimeout time.Duration
	// FoldInterval is how often the writer folds the hourly chart rollup's
	// staged deltas (one row per batch written, committed with its
	// attempts) into webhooks.attempt_hours, in a transaction of its own;
	// it folds once more when it stops. The charts read the staged rows
	// too, so this bounds how many they read, not how fresh they are: at
	// 1000 endpoints a fold upserts about one row per endpoint, whatever
	// the rate. Negative: this writer never folds (another writer of the
	// database must). Defaults to 5s; at most 1h.
	FoldInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.DeliveriesTopic == "" {
		c.DeliveriesTopic = "webhooks.deliveries"
	}
	if c.Topic == "" {
		c.Topic = "webhooks.attempts"
	}
	if c.OpsTopic == "" {
		c.OpsTopic = "webhooks.ops"
	}
	if c.EventsTopic == "" {
		c.EventsTopic = "webhooks.events"
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 5000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 32 << 20
	}
	if c.BatchWait == 0 {
		c.BatchWait = 250 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = 5 * time.Second
	}
	if c.MaxHold == 0 {
		c.MaxHold = 60 * time.Second
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = 50_000
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = maintenance.DefaultDisableAfter
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.FoldInterval == 0 {
		c.FoldInterval = 5 * time.Second
	}
}

func (c *Config) validate() error {
	switch {
	case c.MaxBatch < 1 || c.MaxBatch > 100_000:
		return fmt.Errorf("attempt log max batch: must be between 1 and 100000, got %d", c.MaxBatch)
	case c.MaxBatchBytes < 1<<20 || c.MaxBatchBytes > 1<<30:
		return fmt.Errorf("attempt log max batch bytes: must be between 1 MiB and 1 GiB, got %d", c.MaxBatchBytes)
	case c.BatchWait > 10*time.Second:
		return fmt.Errorf("attempt log batch wait: must be at most 10s, got %s", c.BatchWait)
	case c.Hold > 10*time.Minute:
		return fmt.Errorf("attempt log hold: must be at most 10m, got %s", c.Hold)
	case c.MaxHold < 0 || c.MaxHold > time.Hour:
		return fmt.Errorf("attempt log max hold: must be between 0 and 1h, got %s", c.MaxHold)
	case c.MaxHeld < 1 || c.MaxHeld > 10_000_000:
		return fmt.Errorf("attempt log max held: must be between 1 and 10000000, got %d", c.MaxHeld)
	case c.DisableAfter < time.Minute:
		return fmt.Errorf("disable after: must be at least 1m, got %s", c.DisableAfter)
	case c.RetryMin <= 0:
		return fmt.Errorf("attempt log retry min: must be positive, got %s", c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return fmt.Errorf("attempt log retry max: must be at least retry min (%s), got %s", c.RetryMin, c.RetryMax)
	case c.WriteTimeout < 10*time.Millisecond:
		return fmt.Errorf("attempt log write timeout: must be at least 10ms, got %s", c.WriteTimeout)
	case c.DrainTimeout < 0:
		return fmt.Errorf("attempt log drain timeout: must not be negative, got %s", c.DrainTimeout)
	case c.FoldInterval > time.Hour:
		return fmt.Errorf("attempt log fold interval: must be at most 1h, got %s", c.FoldInterval)
	}
	return nil
}

// Deps are what the Writer works with.
type Deps struct {
	Store  *store.Store
	Logger *slog.Logger
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// KafkaOpts are the shared client options (seeds, logging, metrics); the
	// writer adds its group, topic and manual commits. Its default fetch
	// size (kgo.FetchMaxBytes, 8 MiB) can be overridden here.
	KafkaOpts []kgo.Opt
	// Clock is the time source. Defaults to clock.System{}.
	Clock clock.Clock
	// Tracer, when tracing is on, gets a span per attempt record that
	// carries a traceparent header (the dispatcher's attempt span, its
	// parent), covering the batch's write. Nil or a no-op tracer: none.
	Tracer trace.Tracer
}

// Writer is the attempt-log writer role.
type Writer struct {
	cfg     Config
	deps    Deps
	m       *metrics
	health  *maintenance.Metrics
	backoff func(prev time.Duration) time.Duration
	// skipped holds the attempt ids of the batch in hand that Postgres
	// refused (Run's goroutine only).
	skipped map[string]bool
	// hold are the delivery records waiting for their attempt.
	hold holdings
	// tracer is nil when tracing is off (trace.go).
	tracer trace.Tracer
}

// New checks cfg and registers the writer's metrics.
func New(cfg Config, deps Deps) (*Writer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Logger == nil || deps.Registerer == nil {
		return nil, errors.New("attempt log: store, logger and registerer are required")
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	hm, err := maintenance.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, deps: deps, m: m, health: hm, tracer: tracing.Active(deps.Tracer)}
	w.backoff = func(prev time.Duration) time.Duration {
		if prev == 0 {
			return cfg.RetryMin
		}
		return min(2*prev, cfg.RetryMax)
	}
	return w, nil
}

// Name is the role's name in logs.
func (w *Writer) Name() string { return "attempt-log" }

// Run consumes the attempts topic and writes the log until ctx ends, then
// finishes the batch in hand (within DrainTimeout), commits its offsets and
// leaves the group.
func (w *Writer) Run(ctx context.Context) error {
	// Attempt records are small: 8 MiB per broker fetch is thousands of
	// them, and bounds what sits in memory while Postgres is down (kgo
	// buffers one fetch per broker and fetches no more until it is polled).
	// KafkaOpts may override it.
	// Offsets are marked once their records are written, committed at once,
	// and, if that commit fails, again by kgo's autocommit every second (and
	// at a revoke) until one succeeds: a failed commit of the last batch
	// does not wait for a next batch.
	//
	// At most 64 KiB per partition per fetch (a few hundred records), so
	// that a batch drawn from a backlog mixes the deliveries topic with the
	// attempts topic, rather than holding one topic's records only: a
	// delivery's record and its attempt then meet in one batch.
	//
	// A fetch waits for fetchMinBytes or fetchMaxWait (kgo: answered at
	// the first record): the writer batches for BatchWait anyway, and many
	// small fetches cost the broker a request each and the writer a
	// response to decode each (issue 15).
	opts := append([]kgo.Opt{kgo.FetchMaxBytes(8 << 20), kgo.FetchMaxPartitionBytes(64 << 10),
		kgo.FetchMinBytes(fetchMinBytes), kgo.FetchMaxWait(w.fetchMaxWait()),
		kgo.AutoCommitInterval(time.Second)}, w.deps.KafkaOpts...)
	kh := newKafkaHealth(w.deps.Logger, w.deps.Clock, w.m.kafkaUp)
	opts = append(opts,
		kgo.ConsumerGroup(w.cfg.Group),
		kgo.ConsumeTopics(w.cfg.Topic, w.cfg.DeliveriesTopic),
		// The router writes deliveries in transactions: an aborted one's
		// records are not deliveries.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil || len(req.Topics) > 0 { // an empty request was not sent: it says nothing of the broker
				w.committed(ctx, kh, commitError(resp, err))
			}
		}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("attempt log: kafka client: %w", err)
	}
	defer cl.Close()
	ann := maintenance.NewAnnouncer(cl, w.deps.Store, maintenance.AlertTopics{Events: w.cfg.EventsTopic, Ops: w.cfg.OpsTopic,
		PortalBaseURL: w.cfg.PortalBaseURL}, w.deps.Logger, w.health)
	w.deps.Logger.InfoContext(ctx, "attempt log writer started", "topic", w.cfg.Topic, "group", w.cfg.Group)
	stopFolds := w.startFolds(ctx)
	defer stopFolds()
	for {
		fetches := w.poll(ctx, cl, w.hold.count > 0)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			// Records polled but not written stay uncommitted: the next
			// writer of the group reads them again.
			return nil
		}
		recs := w.records(ctx, kh, fetches)
		if len(recs) == 0 && w.hold.count == 0 {
			continue
		}
		if len(recs) > 0 {
			recs = w.gather(ctx, cl, kh, recs)
		}
		if err = w.handle(ctx, cl, kh, ann, recs); err != nil {
			w.deps.Logger.WarnContext(ctx, "attempt log writer stopping with a batch unwritten; it stays in Kafka and will be read again",
				"records", len(recs), "error", err)
			return nil
		}
	}
}

// fetchMinBytes is how much a fetch of the writer waits for, at most
// fetchMaxWait.
const fetchMinBytes = 256 << 10

// fetchMaxWait is how long a fetch may wait for fetchMinBytes: BatchWait,
// at most 100ms, at least 10ms (a writer that writes every poll at once,
// BatchWait negative, waits 10ms).
func (w *Writer) fetchMaxWait() time.Duration {
	return min(max(w.cfg.BatchWait, 10*time.Millisecond), 100*time.Millisecond)
}

// poll waits for records; with delivery records held for the next batch,
// no longer than BatchWait, so that they are written even if nothing
// follows.
func (w *Writer) poll(ctx context.Context, cl *kgo.Client, holding bool) kgo.Fetches {
	if !holding {
		return cl.PollRecords(ctx, w.cfg.MaxBatch)
	}
	pctx, cancel := context.WithTimeout(ctx, w.holdingPollWait())
	defer cancel()
	return cl.PollRecords(pctx, w.cfg.MaxBatch)
}

// holdingPollWait is how long a poll waits for records while delivery
// records are held (their release is checked after each poll): BatchWait,
// at least 10ms, so that a negative BatchWait (no gathering) does not make
// the writer poll in a busy loop while it holds records.
func (w *Writer) holdingPollWait() time.Duration {
	return max(w.cfg.BatchWait, 10*time.Millisecond)
}

// records returns the records of one poll, reporting its errors to kh.
// kgo retries those itself (and rejoins the group) for as long as it
// takes: the writer waits, with one WARN per outage.
func (w *Writer) records(ctx context.Context, kh *kafkaHealth, fetches kgo.Fetches) []*kgo.Record {
	var fetchErr bool
	fetches.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return // the end of a gathering wait, or of Run
		}
		if loss := (*kgo.ErrDataLoss)(nil); errors.As(err, &loss) {
			kh.reset(ctx, loss)
			return
		}
		fetchErr = true
		kh.fetchFailed(ctx, fmt.Sprintf("fetching %s/%d", topic, partition), err)
	})
	now := time.Now()
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Topic == w.cfg.Topic {
			w.hold.clock.fetched(p, now)
		}
	})
	recs := fetches.Records()
	if len(recs) > 0 && !fetchErr {
		kh.fetched(ctx)
	}
	return recs
}

// gather polls on for BatchWait after the first records of a batch, or
// until it holds MaxBatch records or MaxBatchBytes of values or ctx ends,
// so that a delivery record and its attempt read a moment apart are
// written together.
func (w *Writer) gather(ctx context.Context, cl *kgo.Client, kh *kafkaHealth, recs []*kgo.Record) []*kgo.Record {
	if w.cfg.BatchWait <= 0 {
		return recs
	}
	gctx, cancel := context.WithTimeout(ctx, w.cfg.BatchWait)
	defer cancel()
	size := valueBytes(recs)
	for len(recs) < w.cfg.MaxBatch && size < w.cfg.MaxBatchBytes && gctx.Err() == nil {
		fetches := cl.PollRecords(gctx, w.cfg.MaxBatch-len(recs))
		if fetches.IsClientClosed() {
			break
		}
		more := w.records(ctx, kh, fetches)
		size += valueBytes(more)
		recs = append(recs, more...)
	}
	return recs
}

func valueBytes(recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Value)
	}
	return n
}

// handle writes one batch: the attempts of recs, and the pending rows of
// the delivery records held (see Config.Hold) that are released now, with
// their attempt or without; the others are held on, and the offsets
// committed stop short of them. It returns an error only when the drain
// deadline passed with the batch unwritten.
func (w *Writer) handle(ctx context.Context, cl *kgo.Client, kh *kafkaHealth, ann *maintenance.Announcer,
	recs []*kgo.Record) error {
	wctx, cancel := drainContext(ctx, w.cfg.DrainTimeout)
	defer cancel()

	// Holding compares record timestamps with the wall clock, not with
	// Deps.Clock (the clock of endpoint-health decisions).
	now := time.Now()
	oldest := w.deps.Clock.Now()
	decoded := w.decode(ctx, recs, now)
	for _, kr := range recs {
		oldest = minTime(oldest, kr.Timestamp)
	}
	attempted := make(map[string]bool, len(decoded))
	for _, r := range decoded {
		attempted[r.DeliveryID] = true
	}
	rows := w.hold.release(w.cfg, attempted, now)
	w.hold.pace(cl, w.cfg)
	w.m.held.Set(float64(w.hold.count))
	if len(rows) == 0 && len(decoded) == 0 && len(recs) == 0 {
		return nil // nothing new: the held records wait on
	}
	start := time.Now()
	w.skipped = map[string]bool{}
	// One transaction for both: a delivery whose pending record and first
	// attempt are in this batch gets one row, inserted in its final state.
	spans := w.startSpans(ctx, recs, len(decoded), len(rows))
	res, err := w.write(wctx, decoded, rows, oldest)
	endSpans(spans, err)
	if err != nil {
		return err
	}
	w.m.batches.Inc()
	w.m.batchSize.Observe(float64(len(decoded)))
	w.m.writeSeconds.Observe(time.Since(start).Seconds())
	w.m.lag.Set(max(w.deps.Clock.Now().Sub(oldest).Seconds(), 0))
	w.count(decoded, res)
	w.warnMismatches(wctx, res.Mismatched)
	if len(res.Disabled) > 0 {
		// Errors are logged by the announcer; the events stay owed in
		// Postgres and the health monitor produces them later.
		_ = ann.Disabled(wctx, res.Disabled)
	}
	cl.MarkCommitOffsets(w.marks(recs))
	w.committed(ctx, kh, cl.CommitMarkedOffsets(wctx))
	return nil
}

// decode returns the attempt records of recs and holds their delivery
// records. Records that cannot be decoded are skipped: an attempt with an
// ERROR (it can never be stored), a delivery record silently (the
// dispatcher dead-letters it).
func (w *Writer) decode(ctx context.Context, recs []*kgo.Record, now time.Time) []*attempt.Record {
	decoded := make([]*attempt.Record, 0, len(recs))
	for _, kr := range recs {
		if kr.Topic == w.cfg.DeliveriesTopic {
			w.hold.read(kr)
			d, err := delivery.Decode(kr)
			if err != nil {
				continue
			}
			w.hold.hold(&heldDelivery{
				pending: store.PendingDelivery{ID: d.ID, EventID: d.EventID, EndpointID: d.EndpointID,
					Account: d.Account, EventType: d.EventType, EventCreated: d.EventCreated,
					Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset},
				partition: kr.Partition, offset: kr.Offset, epoch: kr.LeaderEpoch, since: now,
			})
			continue
		}
		if attempt.IsIntent(kr) {
			continue // a dispatcher's note for itself: its request's attempt record follows
		}
		r, err := attempt.Decode(kr)
		if err != nil {
			// Not storable, ever: say so loudly and move past it.
			w.m.records.WithLabelValues("invalid").Inc()
			w.deps.Logger.ErrorContext(ctx, "skipping an attempt record that cannot be stored",
				"topic", kr.Topic, "partition", kr.Partition, "offset", kr.Offset, "error", err)
			continue
		}
		if r.Attempt == 1 && r.ReplayID == "" {
			w.hold.clock.firstAttempt(kr.Partition, r.EventCreated)
		}
		decoded = append(decoded, r)
	}
	return decoded
}

// marks are the offsets to commit after a batch: past the last record of
// each partition of the attempts topic, and for the deliveries topic what
// the held records allow (holdings.commitable).
func (w *Writer) marks(batch []*kgo.Record) map[string]map[int32]kgo.EpochOffset {
	out := map[string]map[int32]kgo.EpochOffset{w.cfg.DeliveriesTopic: w.hold.commitable()}
	for _, r := range batch {
		if r.Topic == w.cfg.DeliveriesTopic {
			continue
		}
		ps := out[r.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			out[r.Topic] = ps
		}
		if cur, ok := ps[r.Partition]; !ok || r.Offset+1 > cur.Offset {
			ps[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		}
	}
	return out
}

// commitError is err, or else the first partition error of resp.
func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil || resp == nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// committed accounts for one offset commit, the writer's own or an
// autocommit. A failure is harmless beyond duplicates: the offsets stay
// marked, the next commit (at the latest the autocommit a second later)
// covers them, and records read again meanwhile are no-ops.
func (w *Writer) committed(ctx context.Context, kh *kafkaHealth, err error) {
	switch {
	case err == nil:
		kh.committed(ctx)
	case errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed):
	default:
		w.m.commitErrors.Inc()
		kh.failed(ctx, "committing offsets", err)
	}
}

// writePending inserts the pending delivery rows of a batch on their own
// (once Postgres refused them with the batch's attempts), retrying
// transient Postgres errors with backoff until ctx ends. Rows Postgres
// refuses for their data are skipped with a log line: the attempt log
// creates a delivery's row from its first attempt anyway.
func (w *Writer) writePending(ctx context.Context, rows []store.PendingDelivery, oldest time.Time) error {
	var wait time.Duration
	for try := 1; len(rows) > 0; try++ {
		tctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
		mismatched, err := w.deps.Store.WritePendingDeliveries(tctx, rows)
		cancel()
		switch {
		case err == nil:
			w.m.postgresUp.Set(1)
			w.m.records.WithLabelValues("pending").Add(float64(len(rows)))
			w.warnMismatches(ctx, mismatched)
			return nil
		case errors.Is(err, store.ErrInvalidData):
			w.m.writeErrors.WithLabelValues("invalid").Inc()
			w.deps.Logger.ErrorContext(ctx, "skipping pending delivery rows Postgres refuses", "rows", len(rows), "error", err)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		w.m.postgresUp.Set(0)
		w.m.writeErrors.WithLabelValues("transient").Inc()
		w.m.lag.Set(max(w.deps.Clock.Now().Sub(oldest).Seconds(), 0))
		wait = w.backoff(wait)
		w.deps.Logger.WarnContext(ctx, "writing pending delivery rows failed; retrying the batch, records stay in Kafka",
			"rows", len(rows), "try", try, "retry_in", wait, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// write writes recs and the pending rows of their batch in one
// transaction, retrying transient Postgres errors with backoff until ctx
// ends. When Postgres refuses the batch for its data, the pending rows are
// written on their own (and skipped if they are the cause), then the
// attempts are split until the offending record is alone, which is logged
// and skipped.
func (w *Writer) write(ctx context.Context, recs []*attempt.Record, pending []store.PendingDelivery, oldest time.Time) (store.WriteAttemptsResult, error) {
	var wait time.Duration
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
		res, err := w.deps.Store.WriteAttempts(tctx, store.WriteAttemptsParams{
			Records: recs, Pending: pending, Now: w.deps.Clock.Now(), DisableAfter: w.cfg.DisableAfter,
		})
		cancel()
		if err == nil {
			w.m.postgresUp.Set(1)
			if len(pending) > 0 {
				w.m.records.WithLabelValues("pending").Add(float64(len(pending)))
			}
			return res, nil
		}
		if errors.Is(err, store.ErrInvalidData) && len(pending) > 0 {
			if err := w.writePending(ctx, pending, oldest); err != nil {
				return res, err
			}
			return w.write(ctx, recs, nil, oldest)
		}
		if errors.Is(err, store.ErrInvalidData) {
			w.m.writeErrors.WithLabelValues("invalid").Inc()
			return w.split(ctx, recs, oldest, err)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		w.m.postgresUp.Set(0)
		w.m.writeErrors.WithLabelValues("transient").Inc()
		w.m.lag.Set(max(w.deps.Clock.Now().Sub(oldest).Seconds(), 0))
		wait = w.backoff(wait)
		w.deps.Logger.WarnContext(ctx, "writing attempt log failed; retrying the batch, records stay in Kafka",
			"records", len(recs), "try", try, "retry_in", wait, "error", err)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (w *Writer) split(ctx context.Context, recs []*attempt.Record, oldest time.Time, cause error) (store.WriteAttemptsResult, error) {
	if len(recs) == 1 {
		r := recs[0]
		w.skipped[r.AttemptID] = true
		w.m.records.WithLabelValues("invalid").Inc()
		w.deps.Logger.ErrorContext(ctx, "skipping an attempt record Postgres refuses",
			"attempt_id", r.AttemptID, "delivery_id", r.DeliveryID, "error", cause)
		return store.WriteAttemptsResult{Inserted: map[string]bool{}}, nil
	}
	half := len(recs) / 2
	left, err := w.write(ctx, recs[:half], nil, oldest)
	if err != nil {
		return left, err
	}
	right, err := w.write(ctx, recs[half:], nil, oldest)
	if err != nil {
		return right, err
	}
	for id := range right.Inserted {
		left.Inserted[id] = true
	}
	left.Disabled = append(left.Disabled, right.Disabled...)
	left.Mismatched = append(left.Mismatched, right.Mismatched...)
	return left, nil
}

// count updates the outcome metrics from the records new to the log only, so
// that a redelivered batch is not counted twice.
func (w *Writer) count(recs []*attempt.Record, res store.WriteAttemptsResult) {
	counted := make(map[string]bool, len(res.Inserted))
	for _, r := range recs {
		if w.skipped[r.AttemptID] {
			continue // counted as invalid
		}
		if !res.Inserted[r.AttemptID] || counted[r.AttemptID] {
			w.m.records.WithLabelValues("duplicate").Inc()
			continue
		}
		counted[r.AttemptID] = true
		w.m.records.WithLabelValues("inserted").Inc()
		w.m.attempts.WithLabelValues(attemptLabel(r.Attempt), string(r.Outcome)).Inc()
		if r.NextAction == attempt.NextDeadLetter {
			w.m.dlq.WithLabelValues(reasonLabel(r.DeadReason)).Inc()
		}
	}
}

// warnMismatches logs one WARN per record whose account is not the account
// of the endpoint (or delivery row) it names, and counts it: the store
// kept it out of the other account's state.
func (w *Writer) warnMismatches(ctx context.Context, ms []store.AccountMismatch) {
	for _, m := range ms {
		w.m.records.WithLabelValues("account_mismatch").Inc()
		w.deps.Logger.WarnContext(ctx, "record's account is not its endpoint's; kept out of that account's delivery state and endpoint health",
			"attempt_id", m.AttemptID, "delivery_id", m.DeliveryID, "endpoint_id", m.EndpointID,
			"account", m.Account, "owner_account", m.Owner)
	}
}

// maxAttemptLabel bounds the attempt label: attempts beyond it share "16+".
const maxAttemptLabel = 16

func attemptLabel(n int) string {
	if n >= maxAttemptLabel {
		return strconv.Itoa(maxAttemptLabel) + "+"
	}
	return strconv.Itoa(n)
}

var reasonRE = regexp.MustCompile(`^[a-z0-9_.-]{1,48}$`)

// reasonLabel keeps the DLQ reason label to the dispatcher's short codes;
// free text (which would explode the series count) becomes "other".
func reasonLabel(reason string) string {
	switch {
	case reason == "":
		return "unknown"
	case reasonRE.MatchString(reason):
		return reason
	default:
		return "other"
	}
}

// drainContext is ctx for as long as it lives, then drain longer: the batch
// in hand gets a chance to be written and committed at shutdown.
func drainContext(ctx context.Context, drain time.Duration) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(drain, cancel)
		context.AfterFunc(wctx, func() { t.Stop() })
	})
	return wctx, func() {
		stop()
		cancel()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

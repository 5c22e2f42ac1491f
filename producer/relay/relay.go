// Package relay owns the outbox CDC relay: it streams committed INSERTs on
// webhooks.outbox from the Postgres WAL by logical replication (pgoutput, a
// publication limited to the outbox and to inserts, a named persistent
// slot) and produces each row as an event envelope to the events topic
// (key = account), where the router fans it out like any other event.
//
// It confirms a WAL position to Postgres only once every record of every
// transaction up to it has been acknowledged by Kafka, so a crash replays
// from the last confirmed commit (never loss); on restart it always
// resumes from the slot's confirmed position, never from the server's
// current one. That position can lag what was published (confirmations
// are periodic, and Postgres persists a slot's position only at
// checkpoints, so a Postgres crash moves it back), so every record carries
// its row's commit LSN and outbox id (headers hookd-lsn, hookd-outbox-id)
// and a starting leader reads the tail of the events topic back to the
// slot's position and skips the rows it finds there: a relay restart, a
// failover, a Postgres crash or an interrupted back-fill publishes no row
// twice. Exactly one relay streams per slot: leadership is a Postgres
// advisory lock held on a connection of its own; the others wait and take
// over when it is released.
//
// Kafka being unreachable, for however long, costs latency, not the
// process: unacknowledged records stop the stream from being read (the
// replication session stays up), the outage is logged once and shown in
// hookd_relay_stalled, and the relay resumes when Kafka does. Only a
// permanent Kafka error (kafkaconn.Permanent: credentials, authorization, a
// deleted topic) ends Run.
//
// A row that can never be published (a poison row) never blocks the rows
// after it: an envelope that cannot be encoded (data nested deeper than
// encoding/json allows: reason invalid_envelope with the envelope's reason,
// invalid_json, as error class, what the router gives the same envelope on
// the events topic), an envelope larger than MaxEnvelopeBytes (the router's
// limit), or a record Kafka refuses for what it is (MESSAGE_TOO_LARGE,
// INVALID_RECORD; first retried alone, in case it only shared a refused
// batch), is dead-lettered to the DLQ topic as a small summary without its
// payload (reason invalid_envelope, oversize or unpublishable, with the
// outbox id, account, type and size), logged and counted, and the slot
// moves past it like past a published row. Rows the relay can publish but
// the router refuses (data not an object or not UTF-8, a bad account or
// type) are dead-lettered by the router, as from any producer. Any other
// produce error is transient (it concerns Kafka, not the row): it stops
// the stream, which restarts from the last confirmed position, and a relay
// that makes no progress for StallTimeout while rows wait says so in
// Ready (/readyz). It never fans out and never writes delivery state.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package relay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/drain"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/stage"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/store"
)

// HeaderSource marks records the relay produces: its value is "outbox".
const HeaderSource = "hookd-source"

// Config configures a Relay.
type Config struct {
	// Slot is the logical replication slot's name; slots are cluster-wide,
	// so two hookd installations on one Postgres server need different
	// names. Defaults to "hookd_relay".
	Slot string
	// Publication is the publication's name. Defaults to "hookd_outbox".
	Publication string
	// EventsTopic receives the envelopes. Defaults to "webhooks.events".
	EventsTopic string
	// DLQTopic receives a summary dead letter for each row that can never
	// be published. Defaults to EventsTopic's prefix followed by ".dlq"
	// ("webhooks.dlq").
	DLQTopic string
	// MaxEnvelopeBytes is the largest envelope the relay publishes; a row
	// whose envelope is larger is dead-lettered as oversize. It should be
	// the router's MaxEnvelopeBytes. Between 1024 and topics.MaxEnvelopeBytes
	// (960 KiB). Defaults to 256 KiB (event.DefaultMaxBytes).
	MaxEnvelopeBytes int
	// LockKey is the advisory lock key relays compete for. Defaults to a
	// hash of Slot.
	LockKey int64
	// LeaderPoll is how often a waiting relay tries the lock, and how
	// often the leader checks its lock connection. Defaults to 1s.
	LeaderPoll time.Duration
	// StatusInterval is how often the leader reports its confirmed
	// position to Postgres; after a crash, about this much of the stream
	// (more after a Postgres crash) is streamed again, and skipped as
	// already published. Defaults to 250ms.
	StatusInterval time.Duration
	// PruneInterval is how often the leader deletes old outbox rows.
	// Defaults to 30s.
	PruneInterval time.Duration
	// PruneAfter is the age past which committed outbox rows are deleted;
	// they are in the slot's WAL already, so it only bounds how long they
	// stay readable in the table. Defaults to 10m.
	PruneAfter time.Duration
	// PruneBatch caps the rows deleted per statement. Defaults to 10000.
	PruneBatch int
	// MetricsInterval is how often the slot's lag is measured. Defaults
	// to 10s.
	MetricsInterval time.Duration
	// RetryBackoff is the first pause after the stream fails; it doubles
	// up to 30s. Defaults to 500ms.
	RetryBackoff time.Duration
	// DrainTimeout bounds waiting for Kafka's acks at shutdown. Defaults
	// to 30s.
	DrainTimeout time.Duration
	// StallAfter is how long the relay's records may wait for Kafka's
	// acknowledgement before it reports an outage: one WARN line (one per
	// outage, whatever the retries), hookd_relay_stalled at 1 until Kafka
	// acknowledges again. The relay waits out any outage; meanwhile it
	// keeps its replication session and stops reading the stream once
	// half of kgo's MaxBufferedRecords are unacknowledged. Defaults to 10s.
	StallAfter time.Duration
	// StallTimeout is how long rows may wait without the relay making any
	// progress (no record acknowledged, the confirmed position not moving)
	// before Ready reports it stalled and /readyz answers 503 with the
	// reason: a stream that fails over and over, or Kafka not
	// acknowledging. At least 10ms. Defaults to 2m.
	StallTimeout time.Duration
	// ResumeScanLimit is the most records a starting leader reads back from
	// the end of each partition of the events topic to learn which rows
	// since the slot's confirmed position are published already (it skips
	// them). It should cover the records published in one checkpoint
	// interval of Postgres, plus any direct producers' records in between.
	// Defaults to 200000.
	ResumeScanLimit int
}

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

func (c *Config) setDefaults() {
	if c.Slot == "" {
		c.Slot = "hookd_relay"
	}
	if c.Publication == "" {
		c.Publication = "hookd_outbox"
	}
	if c.EventsTopic == "" {
		c.EventsTopic = "webhooks.events"
	}
	if c.DLQTopic == "" {
		c.DLQTopic = strings.TrimSuffix(c.EventsTopic, ".events") + ".dlq"
	}
	if c.MaxEnvelopeBytes == 0 {
		c.MaxEnvelopeBytes = event.DefaultMaxBytes
	}
	if c.LockKey == 0 {
		h := fnv.New64a()
		h.Write([]byte("hookd relay " + c.Slot))
		c.LockKey = int64(h.Sum64())
	}
	if c.LeaderPoll == 0 {
		c.LeaderPoll = time.Second
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = 250 * time.Millisecond
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = 30 * time.Second
	}
	if c.PruneAfter == 0 {
		c.PruneAfter = 10 * time.Minute
	}
	if c.PruneBatch == 0 {
		c.PruneBatch = 10000
	}
	if c.MetricsInterval == 0 {
		c.MetricsInterval = 10 * time.Second
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 500 * time.Millisecond
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.StallAfter == 0 {
		c.StallAfter = 10 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 2 * time.Minute
	}
	if c.ResumeScanLimit == 0 {
		c.ResumeScanLimit = 200000
	}
}

func (c *Config) validate() error {
	switch {
	case !nameRE.MatchString(c.Slot):
		return fmt.Errorf("relay slot: %q must be 1..63 of a-z, 0-9 and _", c.Slot)
	case !nameRE.MatchString(c.Publication):
		return fmt.Errorf("relay publication: %q must be 1..63 of a-z, 0-9 and _", c.Publication)
	case c.EventsTopic == "":
		return errors.New("relay events topic: must be set")
	case c.DLQTopic == c.EventsTopic:
		return fmt.Errorf("relay dlq topic: must differ from the events topic %q", c.EventsTopic)
	case c.MaxEnvelopeBytes < 1024 || c.MaxEnvelopeBytes > topics.MaxEnvelopeBytes:
		return fmt.Errorf("relay max envelope bytes: must be between 1024 and %d, got %d", topics.MaxEnvelopeBytes, c.MaxEnvelopeBytes)
	case c.LeaderPoll < 10*time.Millisecond:
		return fmt.Errorf("relay leader poll: must be at least 10ms, got %s", c.LeaderPoll)
	case c.StatusInterval < 10*time.Millisecond || c.StatusInterval > 30*time.Second:
		return fmt.Errorf("relay status interval: must be between 10ms and 30s, got %s", c.StatusInterval)
	case c.PruneInterval < 10*time.Millisecond:
		return fmt.Errorf("relay prune interval: must be at least 10ms, got %s", c.PruneInterval)
	case c.PruneAfter < 0:
		return fmt.Errorf("relay prune after: must not be negative, got %s", c.PruneAfter)
	case c.PruneBatch < 1:
		return fmt.Errorf("relay prune batch: must be at least 1, got %d", c.PruneBatch)
	case c.MetricsInterval < 10*time.Millisecond:
		return fmt.Errorf("relay metrics interval: must be at least 10ms, got %s", c.MetricsInterval)
	case c.RetryBackoff < time.Millisecond:
		return fmt.Errorf("relay retry backoff: must be at least 1ms, got %s", c.RetryBackoff)
	case c.DrainTimeout < time.Second:
		return fmt.Errorf("relay drain timeout: must be at least 1s, got %s", c.DrainTimeout)
	case c.StallAfter < 10*time.Millisecond:
		return fmt.Errorf("relay stall after: must be at least 10ms, got %s", c.StallAfter)
	case c.StallTimeout < 10*time.Millisecond:
		return fmt.Errorf("relay stall timeout: must be at least 10ms, got %s", c.StallTimeout)
	case c.ResumeScanLimit < 1:
		return fmt.Errorf("relay resume scan limit: must be at least 1, got %d", c.ResumeScanLimit)
	}
	return nil
}

// Deps are the Relay's collaborators.
type Deps struct {
	// Store is required; the replication connection is opened with its
	// connection settings.
	Store *store.Store
	// KafkaOpts are the shared client options (seed brokers, logging,
	// metrics).
	KafkaOpts []kgo.Opt
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the relay metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Tracer, when tracing is on, gets a span per published row, a child
	// of the row's traceparent column; its context goes in the record's
	// traceparent header. Nil or a no-op tracer: no span, no header.
	Tracer trace.Tracer
}

// Relay is the outbox CDC relay.
type Relay struct {
	cfg    Config
	st     *store.Store
	opts   []kgo.Opt
	logger *slog.Logger
	m      metrics
	tracer trace.Tracer // nil when tracing is off

	leading atomic.Bool
	outage  outage
	stall   stallClock
}

type metrics struct {
	leader     prometheus.Gauge
	stalled    prometheus.Gauge
	retained   prometheus.Gauge
	lag        prometheus.Gauge
	confirmed  prometheus.Gauge
	published  prometheus.Counter
	backfilled prometheus.Counter
	pruned     prometheus.Counter
	failures   prometheus.Counter
	// skipped counts rows a resumed stream found on the events topic
	// already.
	skipped prometheus.Counter
	// publishLatency is the shared stage histogram's relay_publish series,
	// looked up once rather than by label for every record.
	publishLatency prometheus.Observer
	// receiveLatency is its relay_receive series: commit to the row read
	// from the stream.
	receiveLatency prometheus.Observer
	// deadLettered counts rows dead-lettered instead of published, by
	// reason.
	deadLettered *prometheus.CounterVec
}

// New validates cfg and returns a Relay; Run starts it.
func New(cfg Config, deps Deps) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("relay: no store")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	r := &Relay{cfg: cfg, st: deps.Store, opts: deps.KafkaOpts, logger: deps.Logger.With("slot", cfg.Slot),
		tracer: tracing.Active(deps.Tracer)}
	r.m = metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_relay_leader",
			Help: "1 while this relay holds the leader lock and streams, else 0."}),
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_relay_stalled",
			Help: "1 while the relay waits out an outage (Kafka not acknowledging its records for StallAfter, or its stream failing and retried), else 0."}),
		retained: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_relay_slot_retained_wal_bytes",
			Help: "WAL bytes the relay's replication slot keeps on the Postgres server (current WAL position minus restart_lsn)."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_relay_slot_lag_bytes",
			Help: "WAL bytes written since the slot's confirmed position (current WAL position minus confirmed_flush_lsn)."}),
		confirmed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_relay_confirmed_lsn",
			Help: "The slot's confirmed_flush_lsn as a number: every outbox commit before it is acknowledged by Kafka."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_relay_events_published_total",
			Help: "Outbox rows produced to the events topic and acknowledged."}),
		backfilled: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_relay_events_backfilled_total",
			Help: "Outbox rows published from the snapshot taken when the slot was created."}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_relay_outbox_pruned_total",
			Help: "Outbox rows deleted by the relay's pruning."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_relay_stream_failures_total",
			Help: "Times the replication stream failed and was restarted."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_relay_events_skipped_total",
			Help: "Outbox rows streamed again after a restart, a failover or a Postgres crash and not published again: a starting leader found them on the events topic already."}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookd_relay_events_dead_lettered_total",
			Help: "Outbox rows dead-lettered instead of published, by reason: invalid_envelope (an envelope that cannot be encoded), oversize (envelope over the limit) or unpublishable (refused by Kafka)."},
			[]string{"reason"}),
	}
	for _, reason := range []string{deadletter.ReasonInvalidEnvelope, deadletter.ReasonOversize, deadletter.ReasonUnpublishable} {
		r.m.deadLettered.WithLabelValues(reason)
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{r.m.leader, r.m.stalled, r.m.retained, r.m.lag, r.m.confirmed, r.m.published,
			r.m.backfilled, r.m.pruned, r.m.failures, r.m.skipped, r.m.deadLettered} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("relay metrics: %w", err)
			}
		}
	}
	r.outage = outage{logger: r.logger, gauge: r.m.stalled}
	h, err := stage.Histogram(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	r.m.publishLatency = h.WithLabelValues(stage.RelayPublish)
	r.m.receiveLatency = h.WithLabelValues(stage.RelayReceive)
	return r, nil
}

// Name names the role.
func (r *Relay) Name() string { return "relay" }

// Leading reports whether this relay currently streams.
func (r *Relay) Leading() bool { return r.leading.Load() }

// Ready reports whether the relay makes progress: nil, or why not when
// rows have waited without progress for longer than StallTimeout (a row
// failing the stream over and over, Kafka not acknowledging, Postgres
// unreachable). A relay standing by is ready. /readyz asks it.
func (r *Relay) Ready(context.Context) error {
	return r.stall.stalled(time.Now(), r.cfg.StallTimeout)
}

// Run competes for leadership and streams while it leads, until ctx ends;
// then it waits for Kafka's acks (within DrainTimeout), confirms what was
// acknowledged, releases the lock and returns nil. Transient failures
// (Kafka or Postgres unreachable, for however long) are retried with
// backoff and reported once per outage; a setup problem only the operator
// can fix (wal_level, REPLICATION attribute, a foreign slot or
// publication, a permanent Kafka error such as refused credentials or
// authorization) is returned as one line.
func (r *Relay) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, r.opts...), kgo.DefaultProduceTopic(r.cfg.EventsTopic), kgo.ProducerLinger(produceLinger))...)
	if err != nil {
		return fmt.Errorf("relay kafka client: %w", err)
	}
	defer cl.Close()
	// A client of its own for retrying a refused record alone: nothing
	// else shares its batches.
	solo, err := kgo.NewClient(append(append([]kgo.Opt{}, r.opts...), kgo.DefaultProduceTopic(r.cfg.EventsTopic))...)
	if err != nil {
		return fmt.Errorf("relay kafka client: %w", err)
	}
	defer solo.Close()
	// And one that reads the events topic's tail when a leader starts.
	tail, err := kgo.NewClient(append(append([]kgo.Opt{}, r.opts...), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("relay kafka client: %w", err)
	}
	defer tail.Close()
	kc := clients{produce: cl, solo: solo, tail: tail}

	var wg sync.WaitGroup
	defer wg.Wait()
	mctx, stopMetrics := context.WithCancel(ctx)
	defer stopMetrics()
	wg.Go(func() { r.measure(mctx) })

	backoff := r.cfg.RetryBackoff
	for {
		led, err := r.lead(ctx, kc)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, store.ErrRelaySetup) {
			return err
		}
		if kafkaconn.Permanent(err) {
			return fmt.Errorf("relay: Kafka refuses the relay (fix its credentials, ACLs or topics): %w", err)
		}
		if led {
			backoff = r.cfg.RetryBackoff
		}
		if err == nil {
			err = errors.New("the stream ended without saying why")
		}
		r.m.failures.Inc()
		r.stall.waiting(time.Now(), "the stream failed: "+err.Error())
		r.outage.begin(ctx, "relay stream stopped; retrying", "error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// produceLinger is how long the relay's producer waits for more records
// before sending a batch (the shared options' 5ms would be added to every
// event's latency): a transaction's rows arrive together from the WAL, so
// one millisecond still sends each transaction, and those committed with
// it, in one request.
const produceLinger = time.Millisecond

// clients are the relay's Kafka clients.
type clients struct {
	produce *kgo.Client // batching, shared by every row
	solo    *kgo.Client // one record at a time, for retrying a row alone
	tail    *kgo.Client // reads the events topic's tail
}

// lead waits for the lock, then streams until ctx ends or something
// fails. led reports whether it got to stream.
func (r *Relay) lead(ctx context.Context, kc clients) (led bool, err error) {
	lock, err := r.waitForLock(ctx)
	if err != nil || lock == nil {
		return false, err
	}
	defer func() {
		rctx, cancel := drain.Context(ctx, closeTimeout)
		defer cancel()
		lock.Release(rctx)
	}()
	r.leading.Store(true)
	r.m.leader.Set(1)
	defer func() {
		r.leading.Store(false)
		r.m.leader.Set(0)
	}()
	r.logger.InfoContext(ctx, "relay is the leader")

	if err := r.st.CheckLogicalReplication(ctx); err != nil {
		return false, err
	}
	if err := r.st.EnsureOutboxPublication(ctx, r.cfg.Publication); err != nil {
		return false, err
	}

	sctx, stop := context.WithCancelCause(ctx)
	var watcher sync.WaitGroup
	// Stop the lock watcher before waiting for it: when stream returns on
	// its own (a setup error such as a foreign slot), sctx is still live.
	defer func() {
		stop(nil)
		watcher.Wait()
	}()
	watcher.Go(func() {
		t := time.NewTicker(r.cfg.LeaderPoll)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if err := lock.Check(sctx); err != nil && sctx.Err() == nil {
					stop(err)
					return
				}
			}
		}
	})
	return true, r.stream(sctx, ctx, kc)
}

func (r *Relay) waitForLock(ctx context.Context) (*store.LeaderLock, error) {
	logged := false
	for {
		lock, err := r.st.TryLeaderLock(ctx, r.cfg.LockKey)
		if err != nil || lock != nil {
			return lock, err
		}
		// Another relay leads: its readiness is the one that counts, not
		// how this one's stream last ended.
		r.stall.progress()
		if !logged {
			r.logger.InfoContext(ctx, "relay standing by: another relay holds the leader lock")
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(r.cfg.LeaderPoll):
		}
	}
}

func (r *Relay) replicationConfig() *pgconn.Config {
	cfg := r.st.Pool().Config().ConnConfig.Config.Copy()
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "hookd-relay"
	// pgoutput sends columns in the session's text output; created_at is
	// read in ISO form only, so a database or role with another DateStyle
	// must not reach this session (every insert would fail to decode).
	cfg.RuntimeParams["DateStyle"] = "ISO"
	return cfg
}

// measure refreshes the slot metrics until ctx ends.
func (r *Relay) measure(ctx context.Context) {
	t := time.NewTicker(r.cfg.MetricsInterval)
	defer t.Stop()
	for {
		lag, err := r.st.ReplicationSlotLag(ctx, r.cfg.Slot)
		if err == nil && lag.LagBytes == 0 {
			r.stall.progress() // confirmed up to the current WAL position: nothing waits
		}
		if err == nil {
			r.m.retained.Set(float64(lag.RetainedBytes))
			r.m.lag.Set(float64(lag.LagBytes))
			r.m.confirmed.Set(float64(lag.ConfirmedLSN))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prune deletes old outbox rows every PruneInterval until ctx ends.
func (r *Relay) prune(ctx context.Context) {
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.st.PruneOutbox(ctx, r.cfg.PruneAfter, r.cfg.PruneBatch)
		r.m.pruned.Add(float64(n))
		if err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "relay outbox pruning failed", "error", err.Error())
		}
	}
}

// origin is where a row comes from: its transaction's commit LSN and time
// (zero for a back-filled row).
type origin struct {
	lsn       pglogrepl.LSN
	committed time.Time
}

// isSlotBusy reports whether err says the slot is in use by another
// connection (a previous leader's walsender not yet gone).
func isSlotBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

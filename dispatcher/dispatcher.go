package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/drain"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/retrytiers"
)

// Dispatcher consumes deliveries and retry tiers and makes the HTTP
// attempts. Build it with New, run it with Run.
type Dispatcher struct {
	cfg       Config
	names     topics.Names
	tierOf    map[string]int // retry topic -> tier index
	endpoints Endpoints
	log       *slog.Logger
	clock     clock.Clock
	policy    retrytiers.Policy
	m         *metrics
	sender    *sender
	breakers  *breakers
	kopts     []kgo.Opt
	plainOpts []kgo.Opt // Deps.PlainKafkaOpts
	// tracer is nil when tracing is off (trace.go).
	tracer trace.Tracer

	// newClient is kgo.NewClient; a test widens the start-up window with it.
	newClient func(...kgo.Opt) (*kgo.Client, error)
	// clientReady is closed once cl is set. Group management starts inside
	// newClient, so a rebalance callback can run before newClient returns:
	// the revoke and lost callbacks wait for it, and everything else they
	// use (the loop, workCtx) is started before the client.
	clientReady chan struct{}
	cl          *kgo.Client
	// intents produces the intent records (intents.go), without linger:
	// they are on a request's path (a 1ms linger raised the p50 of the
	// http stage at half load from 19 to 31-54 ms in hookbench).
	intents *kgo.Client
	// intentQ holds the intents for writeIntents (intents.go), which
	// closes intentsDone when it stops taking them.
	intentQ     chan *intentReq
	intentsDone chan struct{}
	// res is the poll loop's state of the partitions to resume.
	res resumer
	// inflight counts the requests started and not completed, per
	// partition number (resume.go).
	inflight inflight

	// stopPoll ends the poll loop with a permanent error (fatal).
	stopPoll context.CancelCauseFunc
	// Kafka operations that fail during an outage: one WARN when each
	// starts failing, one INFO when it recovers.
	fetchOutage, commitOutage, produceOutage outage
	// slowProduces finds produces unanswered for produceSlow: kgo retries
	// by itself while the broker is unreachable.
	slowProduces slowWatch

	// workCtx is the context of requests and produces; it outlives Run's
	// context so that shutdown drains, and is cancelled after DrainTimeout.
	workCtx    context.Context
	cancelWork context.CancelFunc
	wg         sync.WaitGroup // every request and finish goroutine

	commitMu sync.Mutex // one commit at a time, so a stale one never lands last
	refusals refusals   // SSRF refusals already logged

	// The loop (loop.go) owns the scheduling core and what follows; other
	// goroutines reach it through events, calls and wake only.
	core        *sched.Core
	jobs        chan *sched.Item // requests started, for the requesters
	events      chan event
	calls       chan func()
	wake        chan struct{}
	loopDone    chan struct{}
	wakeTimer   clock.Timer
	armedAt     time.Time
	idleWaiters []idleWaiter
}

// New validates cfg and builds a dispatcher. It connects to nothing; Run does.
func New(cfg Config, deps Deps) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := deps.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	policy := retrytiers.Policy{Schedule: cfg.Topics.Schedule, Jitter: cfg.RetryJitter}
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	d := &Dispatcher{
		cfg:         cfg,
		names:       topics.NamesFor(cfg.Topics),
		tierOf:      map[string]int{},
		endpoints:   deps.Endpoints,
		log:         deps.Logger,
		clock:       deps.Clock,
		policy:      policy,
		m:           m,
		sender:      newSender(cfg).logging(deps.Logger, cfg.LogDeliveries),
		kopts:       deps.KafkaOpts,
		plainOpts:   deps.PlainKafkaOpts,
		refusals:    refusals{last: map[string]time.Time{}},
		tracer:      tracing.Active(deps.Tracer),
		jobs:        make(chan *sched.Item, cfg.Concurrency),
		intentQ:     make(chan *intentReq, cfg.Concurrency),
		intentsDone: make(chan struct{}),
		events:      make(chan event, eventBuffer),
		calls:       make(chan func()),
		wake:        make(chan struct{}, 1),
		loopDone:    make(chan struct{}),

		newClient:     kgo.NewClient,
		clientReady:   make(chan struct{}),
		fetchOutage:   outage{what: "fetching records"},
		commitOutage:  outage{what: "committing offsets"},
		produceOutage: outage{what: "producing retry, dead-letter and attempt records"},
	}
	if d.plainOpts == nil {
		d.plainOpts = deps.KafkaOpts
	}
	for i, t := range d.names.Retry {
		d.tierOf[t] = i
	}
	// Breakers run on the wall clock, as request timeouts do.
	d.breakers = newBreakers(cfg.Breaker, cfg.Timeout, clock.System{}, m)
	d.core = newCore(cfg, deps.Endpoints, observer{m: m, tierOf: d.tierOf})
	return d, nil
}

// setDefaults fills in the optional dependencies and checks the required.
func (deps *Deps) setDefaults() error {
	if deps.Endpoints == nil {
		return errors.New("dispatcher: no endpoint index (Deps.Endpoints)")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	return nil
}

// newCore is the scheduling core under cfg's limits.
func newCore(cfg Config, eps Endpoints, obs observer) *sched.Core {
	return sched.New(sched.Config{
		Concurrency: cfg.Concurrency, MaxInFlight: cfg.MaxInFlight, MaxEndpointInFlight: cfg.MaxEndpointInFlight,
		PartitionMaxHeld: cfg.PartitionMaxHeld, EndpointBacklog: cfg.EndpointBacklog,
		AccountLinger: cfg.AccountLinger, HoldAfter: holdAfter,
	}, lookup(eps), obs)
}

// Topics returns the topics the dispatcher reads and writes.
func (d *Dispatcher) Topics() topics.Names { return d.names }

// partitioner sends retry, dead-letter and attempt records to the partition number
// set on them (the source record's, so an endpoint stays on one partition
// number across topics) and hashes the key of everything else, as Kafka's
// default partitioner does.
type partitioner struct {
	manual map[string]bool
	hash   kgo.Partitioner
}

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	if p.manual[t] {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return p.hash.ForTopic(t)
}

// holdAfter is how long an endpoint or account at its limit goes without
// an answer before it counts as holding its slots: only then are its
// records deferred to a retry tier (backlog_full, fair_share) instead of
// waiting. Healthy receivers answer within it, however busy: their
// records wait and fetching slows (backpressure), never deferred.
const holdAfter = time.Second

// Fetch batching (clientOpts): a record waits at most fetchMaxWait in the
// broker, less once fetchMinBytes (of record batches, compressed) are
// there. At 7000 records/s on 6 partitions this takes 4 times fewer
// fetches, 85 records each, than a fetch answered at the first record, and
// 12-15% less CPU per delivery (BenchmarkDispatcherStream). The cost is
// at most fetchMaxWait of latency per record, and a fetch request every
// fetchMaxWait per broker while idle. 10ms is the least kgo allows.
//
// A fetch takes at most fetchMaxPartitionBytes of one partition (kgo's
// default: 1 MiB, thousands of records). kgo drops the records it
// buffered for a partition once it is paused, and fetches them again
// after it resumes: a partition paused for holding PartitionMaxHeld
// records read and decoded up to a whole fetch's share of it for nothing
// at every pause (BenchmarkDispatcher, a backlog of 60000 records: 2.35
// records fetched per delivery with 1 MiB, 1.52 with 64 KiB, the least
// its producer's 80 KiB batches allow; fetch processing 8.2% -> 5.9% of
// its CPU).
//
// Produce batching: everything the dispatcher produces (attempt records,
// retry-tier and dead-letter records) waits up to produceLinger for more
// records of its partition. None of it is on a delivery's path: the
// request has been sent, an attempt record only feeds the delivery log and
// a retry waits for its tier's delay (30s in the default schedule). A
// record's offset is committed once what it produced is acknowledged: a
// delivered one's attempt record (produced without waiting), a failed
// one's retry or dead letter and then its attempt record (the first is
// waited for, by the record's own goroutine, not a request slot), so a
// failed record stays held up to twice produceLinger longer, and a crash
// re-sends that much more. kafkaconn's 5ms made batches of 11 attempt
// records at 11,000 deliveries/s on 6 partitions; 50ms makes them 73: 6
// times fewer batches for the broker to write and the attempt-log writer
// to read, 195 bytes per record compressed instead of 246 (hookbench; the
// CPU saved, about 5% of the embedded broker's, is within its noise).
const (
	produceLinger = 50 * time.Millisecond

	fetchMinBytes          = 64 << 10
	fetchMaxWait           = 10 * time.Millisecond
	fetchMaxPartitionBytes = 64 << 10
)

// The group's timing besides SessionTimeout (the client options say why).
const (
	heartbeatInterval = time.Second
	rebalanceSlack    = 10 * time.Second
)

func (d *Dispatcher) clientOpts() []kgo.Opt {
	manual := map[string]bool{d.names.DLQ: true, d.names.Attempts: true}
	for _, t := range d.names.Retry {
		manual[t] = true
	}
	opts := []kgo.Opt{
		// While records stream in, a fetch waits for fetchMinBytes or
		// fetchMaxWait: records come in fewer, larger fetches, which
		// cuts the fetch requests and the wake-ups of the poll loop, the
		// workers and the runtime's idle threads per delivery. A resumed
		// partition is fetched with the next fetch request, so the short
		// max wait also keeps tier resumption and backpressure prompt.
		kgo.FetchMinBytes(fetchMinBytes),
		kgo.FetchMaxWait(fetchMaxWait),
		// A partition paused when full drops what was buffered of it:
		// small shares keep that waste small.
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
	}
	opts = append(opts, d.kopts...)
	if d.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(d.cfg.InstanceID))
	}
	return append(opts,
		kgo.ProducerLinger(produceLinger),
		kgo.ConsumerGroup(d.cfg.Group),
		kgo.SessionTimeout(d.cfg.SessionTimeout),
		// A rebalance must end before the first member to rejoin has been
		// silent for SessionTimeout: the embedded broker (kfake) expires a
		// member waiting in JoinGroup like a silent one and never answers
		// its join, which then hangs until the rebalance timeout plus 10s
		// (TestChaosShortKill9 saw the group stuck for over a minute).
		// Heartbeats every second start every member's revoke within a
		// second of the rebalance; a rebalance timeout of RevokeTimeout
		// plus 10s, not 60s, bounds such a hang. Real Kafka waits for
		// joining members whatever their session.
		kgo.HeartbeatInterval(heartbeatInterval),
		kgo.RebalanceTimeout(d.cfg.RevokeTimeout+rebalanceSlack),
		kgo.ConsumeTopics(append([]string{d.names.Deliveries}, d.names.Retry...)...),
		// Range assigns partition i of every topic to the same member when
		// the topics share a partition count (topics.Provision enforces
		// it), so one endpoint's deliveries and retries meet in one process.
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// The router produces in transactions: records of an aborted one
		// are never delivered.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(d.onAssigned),
		kgo.OnPartitionsRevoked(d.onRevoked),
		kgo.OnPartitionsLost(d.onLost),
		kgo.RecordPartitioner(partitioner{manual: manual, hash: kgo.UniformBytesPartitioner(64<<10, true, true, nil)}),
	)
}

// Run joins the group and dispatches until ctx ends, then stops fetching,
// waits up to DrainTimeout for the requests in flight and their produces,
// commits the watermarks and leaves the group. It returns nil after a clean
// shutdown. Kafka being unreachable does not end it: fetches, commits and
// produces are retried until the broker answers. Only a permanent error
// (kafkaconn.Permanent: authentication, authorization, a deleted topic, a
// record the broker never accepts) ends it early, with that error.
func (d *Dispatcher) Run(ctx context.Context) error {
	// Everything the rebalance callbacks use exists before the client:
	// group management starts inside newClient.
	d.workCtx, d.cancelWork = drain.Context(ctx, 0)
	defer d.cancelWork()
	pollCtx, stopPoll := context.WithCancelCause(ctx)
	defer stopPoll(nil)
	d.stopPoll = stopPoll
	stopLoop := make(chan struct{})
	go d.runLoop(stopLoop)
	for range d.cfg.Concurrency {
		go d.requester()
	}
	defer func() { close(stopLoop); <-d.loopDone; close(d.jobs) }()
	intents, err := kgo.NewClient(append(slices.Clip(d.plainOpts),
		kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("dispatcher intent client: %w", err)
	}
	defer intents.Close()
	d.intents = intents
	go d.writeIntents()
	cl, err := d.newClient(d.clientOpts()...)
	if err != nil {
		return fmt.Errorf("dispatcher kafka client: %w", err)
	}
	d.cl = cl
	close(d.clientReady)

	bg := make(chan struct{})
	var bgWG sync.WaitGroup
	bgWG.Go(func() { d.background(bg) })
	bgWG.Go(func() {
		d.slowProduces.run(bg, func() { d.produceOutage.fail(d.workCtx, d.log, errProduceSlow) })
	})

	d.log.InfoContext(ctx, "dispatcher started", "group", d.cfg.Group, "topics", append([]string{d.names.Deliveries}, d.names.Retry...))
	runErr := d.poll(ctx, pollCtx)

	d.shutdown(ctx)
	close(bg)
	bgWG.Wait()
	cl.Close()
	d.leaveStatic(ctx)
	d.sender.closeIdle()
	d.log.InfoContext(ctx, "dispatcher stopped")
	return runErr
}

// fatal ends Run with err, a permanent error; the first one wins.
func (d *Dispatcher) fatal(err error) {
	d.log.Error("dispatcher stopping on a permanent Kafka error", "error", err)
	d.stopPoll(fmt.Errorf("dispatcher: %w", err))
}

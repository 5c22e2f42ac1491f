package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/drain"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/topics"
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

	// newClient is kgo.NewClient; a test widens the start-up window with it.
	newClient func(...kgo.Opt) (*kgo.Client, error)
	// clientReady is closed once cl is set. Group management starts inside
	// newClient, so a rebalance callback can run before newClient returns:
	// the revoke and lost callbacks wait for it, and everything else they
	// use (gate, pauses, workCtx) is built before the client.
	clientReady chan struct{}
	cl          *kgo.Client
	gate        *retrytiers.Gate
	pauses      *pauses

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
	wg         sync.WaitGroup // every worker and finisher goroutine

	commitMu sync.Mutex // one commit at a time, so a stale one never lands last

	mu       sync.Mutex
	parts    map[kafkaconn.TopicPartition]*partState
	eps      map[string]*endpointState
	ready    []*endpointState // endpoints with queued work and a free slot, round-robin
	slots    int              // free global request slots
	stopping bool
	// accts are the accounts of the endpoint states, and those lingering;
	// active counts the busy and lingering ones (the fair share divisor);
	// parkedAccts are those with endpoints parked at their share.
	accts       map[string]*accountState
	active      int
	parkedAccts []*accountState

	refusals refusals // SSRF refusals already logged
	// idleWorkers wait for a request, the longest idle first; workersDone:
	// the work ended, no worker waits any more (schedule.go).
	idleWorkers []*idleWorker
	workersDone bool
	// keeping: a worker's work pumps; the first request started goes to
	// kept, for that worker to run next.
	keeping bool
	kept    job
}

// New validates cfg and builds a dispatcher. It connects to nothing; Run does.
func New(cfg Config, deps Deps) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Endpoints == nil {
		return nil, errors.New("dispatcher: no endpoint index (Deps.Endpoints)")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
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
		cfg:       cfg,
		names:     topics.NamesFor(cfg.Topics),
		tierOf:    map[string]int{},
		endpoints: deps.Endpoints,
		log:       deps.Logger,
		clock:     deps.Clock,
		policy:    policy,
		m:         m,
		sender:    newSender(cfg).logging(deps.Logger, cfg.LogDeliveries),
		kopts:     deps.KafkaOpts,
		parts:     map[kafkaconn.TopicPartition]*partState{},
		eps:       map[string]*endpointState{},
		accts:     map[string]*accountState{},
		slots:     cfg.Concurrency,
		refusals:  refusals{last: map[string]time.Time{}},

		newClient:     kgo.NewClient,
		clientReady:   make(chan struct{}),
		fetchOutage:   outage{what: "fetching records"},
		commitOutage:  outage{what: "committing offsets"},
		produceOutage: outage{what: "producing retry, dead-letter and attempt records"},
	}
	for i, t := range d.names.Retry {
		d.tierOf[t] = i
	}
	// Breakers run on the wall clock, as request timeouts do.
	d.breakers = newBreakers(cfg.Breaker, cfg.Timeout, clock.System{}, m)
	return d, nil
}

// Topics returns the topics the dispatcher reads and writes.
func (d *Dispatcher) Topics() topics.Names { return d.names }

// partitioner sends retry and dead-letter records to the partition number
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

func (d *Dispatcher) clientOpts() []kgo.Opt {
	manual := map[string]bool{d.names.DLQ: true}
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
	return append(opts,
		kgo.ProducerLinger(produceLinger),
		kgo.ConsumerGroup(d.cfg.Group),
		kgo.SessionTimeout(d.cfg.SessionTimeout),
		kgo.ConsumeTopics(append([]string{d.names.Deliveries}, d.names.Retry...)...),
		// Range assigns partition i of every topic to the same member when
		// the topics share a partition count (topics.Provision enforces
		// it), so one endpoint's deliveries and retries meet in one process.
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
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
	context.AfterFunc(d.workCtx, func() {
		d.mu.Lock()
		d.retireWorkersLocked(time.Now(), true)
		d.mu.Unlock()
	})
	pollCtx, stopPoll := context.WithCancelCause(ctx)
	defer stopPoll(nil)
	d.stopPoll = stopPoll
	d.pauses = &pauses{by: map[kafkaconn.TopicPartition]uint8{}}
	d.gate = retrytiers.NewGate(d.clock, duePauser{d.pauses}, d.onDue)
	cl, err := d.newClient(d.clientOpts()...)
	if err != nil {
		return fmt.Errorf("dispatcher kafka client: %w", err)
	}
	d.cl = cl
	d.pauses.cl = cl
	close(d.clientReady)

	bg := make(chan struct{})
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() {
		defer bgWG.Done()
		d.background(bg)
	}()
	go func() {
		defer bgWG.Done()
		d.slowProduces.run(bg, func() { d.produceOutage.fail(d.workCtx, d.log, errProduceSlow) })
	}()

	d.log.InfoContext(ctx, "dispatcher started", "group", d.cfg.Group, "topics", append([]string{d.names.Deliveries}, d.names.Retry...))
	runErr := d.poll(ctx, pollCtx)

	d.shutdown(ctx)
	close(bg)
	bgWG.Wait()
	cl.Close()
	d.sender.closeIdle()
	d.log.InfoContext(ctx, "dispatcher stopped")
	return runErr
}

// fatal ends Run with err, a permanent error; the first one wins.
func (d *Dispatcher) fatal(err error) {
	d.log.Error("dispatcher stopping on a permanent Kafka error", "error", err)
	d.stopPoll(fmt.Errorf("dispatcher: %w", err))
}

// poll reads records until ctx ends (nil) or pollCtx ends with a
// permanent error (that error).
func (d *Dispatcher) poll(ctx, pollCtx context.Context) error {
	for {
		fs := d.cl.PollRecords(pollCtx, d.cfg.MaxPollRecords)
		if pollCtx.Err() != nil || fs.IsClientClosed() {
			d.cl.AllowRebalance()
			if err := context.Cause(pollCtx); ctx.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		var failed error
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if kafkaconn.Permanent(err) {
				d.fatal(fmt.Errorf("fetching %s[%d]: %w", t, p, err))
			}
			failed = fmt.Errorf("%s[%d]: %w", t, p, err)
		})
		if failed != nil {
			d.fetchOutage.fail(ctx, d.log, failed)
		} else if !fs.Empty() {
			d.fetchOutage.ok(ctx, d.log)
		}
		d.mu.Lock()
		now := d.clock.Now()
		fs.EachRecord(func(r *kgo.Record) { d.admitLocked(r, now) })
		d.pumpLocked()
		d.mu.Unlock()
		d.cl.AllowRebalance()
	}
}

// background commits watermarks, refreshes gauges and evicts idle breakers.
func (d *Dispatcher) background(stop <-chan struct{}) {
	tick := time.NewTicker(d.cfg.CommitInterval)
	defer tick.Stop()
	sweepEvery := max(d.cfg.Breaker.IdleEvict/10, time.Second)
	lastSweep := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(d.workCtx, 10*time.Second)
		d.commit(ctx, nil)
		cancel()
		d.refreshGauges()
		d.mu.Lock()
		d.retireWorkersLocked(time.Now(), false)
		d.mu.Unlock()
		if time.Since(lastSweep) >= sweepEvery {
			lastSweep = time.Now()
			d.breakers.sweep()
			d.refusals.sweep(lastSweep)
		}
	}
}

// shutdown drops unstarted work, drains what is in flight and commits.
func (d *Dispatcher) shutdown(ctx context.Context) {
	d.mu.Lock()
	d.stopping = true
	var tps []kafkaconn.TopicPartition
	for tp, ps := range d.parts {
		tps = append(tps, tp)
		ps.waiting = nil
	}
	d.dropQueuedLocked(func(*partState) bool { return true })
	d.mu.Unlock()
	d.gate.Forget(tps...)

	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.cfg.DrainTimeout):
		d.log.WarnContext(ctx, "dispatcher drain timed out; abandoning requests in flight, their records will be re-read",
			"drain_timeout", d.cfg.DrainTimeout)
		d.cancelWork()
		<-done
	}
	cctx, cancel := drain.Context(ctx, 10*time.Second)
	defer cancel()
	d.commit(cctx, nil)
}

// commit commits the watermark of every partition (or of only) that moved.
func (d *Dispatcher) commit(ctx context.Context, only map[kafkaconn.TopicPartition]bool) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	d.mu.Lock()
	for tp, ps := range d.parts {
		if only != nil && !only[tp] {
			continue
		}
		wm, ok := ps.watermark()
		if !ok || wm.Offset <= ps.committed {
			continue
		}
		if offsets[tp.Topic] == nil {
			offsets[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[tp.Topic][tp.Partition] = wm
	}
	d.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	var failed error
	d.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					failed = err
					continue
				}
				tp := kafkaconn.TopicPartition{Topic: t.Topic, Partition: p.Partition}
				if ps := d.parts[tp]; ps != nil {
					ps.committed = max(ps.committed, offsets[t.Topic][p.Partition].Offset)
				}
			}
		}
	})
	if failed != nil {
		d.m.commits.WithLabelValues("error").Inc()
		d.commitOutage.fail(ctx, d.log, failed)
		return
	}
	d.m.commits.WithLabelValues("ok").Inc()
	d.commitOutage.ok(ctx, d.log)
}

func (d *Dispatcher) refreshGauges() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	d.sweepEndpointsLocked(now)
	d.sweepAccountsLocked(time.Now())
	d.shedLocked(now)
	waiting := map[string]int{}
	oldestDue := map[string]time.Duration{}
	for _, t := range d.names.Retry {
		waiting[t] = 0
		oldestDue[t] = 0
	}
	for tp, ps := range d.parts {
		if _, ok := d.tierOf[tp.Topic]; ok {
			oldestDue[tp.Topic] = max(oldestDue[tp.Topic], oldestDueAge(ps, now))
		}
		p := strconv.Itoa(int(tp.Partition))
		d.m.held.WithLabelValues(tp.Topic, p).Set(float64(ps.pending.len()))
		lag := 0.0
		if wm, ok := ps.watermark(); ok {
			lag = float64(ps.lastSeen + 1 - wm.Offset)
		}
		d.m.lag.WithLabelValues(tp.Topic, p).Set(lag)
		if _, ok := waiting[tp.Topic]; ok {
			waiting[tp.Topic] += len(ps.waiting)
		}
	}
	for t, n := range waiting {
		d.m.tierWaiting.WithLabelValues(t).Set(float64(n))
	}
	for t, age := range oldestDue {
		d.m.tierOldestDue.WithLabelValues(t).Set(age.Seconds())
	}
}

// oldestDueAge returns how long the oldest record of ps that is due and
// not yet started has been due at now; 0 when none. Such a record waits
// in its endpoint's queue (for a slot or its rate) or behind a tier head
// that is not due yet (an earlier due time behind a later one: jitter,
// Retry-After). Records are decoded once; a malformed one is skipped here
// and dead-lettered when routed.
func oldestDueAge(ps *partState, now time.Time) time.Duration {
	var oldest time.Duration
	for _, it := range ps.pending.all() {
		if it.started || it.rec == nil {
			continue
		}
		if it.d == nil {
			dl, err := delivery.Decode(it.rec)
			if err != nil {
				continue
			}
			it.d = dl
		}
		if due := it.d.DueAt; !due.IsZero() && !due.After(now) {
			oldest = max(oldest, now.Sub(due))
		}
	}
	return oldest
}

// onAssigned creates the state of new partitions. It uses only what New
// built: kgo runs the revoke that may follow only after it returns, so
// it must not wait for the client.
func (d *Dispatcher) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			tp := kafkaconn.TopicPartition{Topic: t, Partition: p}
			d.parts[tp] = &partState{tp: tp, lastSeen: -1, committed: -1}
		}
	}
	d.log.Info("partitions assigned", "partitions", fmtTPs(assigned))
}

// onRevoked stops the revoked partitions, waits for their requests in
// flight, commits their watermarks and forgets them, all within
// RevokeTimeout.
func (d *Dispatcher) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	<-d.clientReady
	d.release(ctx, revoked, true)
}

// onLost forgets lost partitions without committing: another member owns
// them already.
func (d *Dispatcher) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	<-d.clientReady
	d.release(ctx, lost, false)
}

// release stops the partitions of m. One deadline, RevokeTimeout from
// now, bounds all of it: the waits for the requests in flight end at
// three quarters of it, the commit at the deadline. A request still in
// flight then is abandoned: its record is unfinished, so the partition's
// next owner attempts it again (a duplicate, never a skip).
func (d *Dispatcher) release(ctx context.Context, m map[string][]int32, commit bool) {
	if len(m) == 0 {
		return
	}
	only := map[kafkaconn.TopicPartition]bool{}
	var tps []kafkaconn.TopicPartition
	var idle []chan struct{}
	d.mu.Lock()
	for t, ps := range m {
		for _, p := range ps {
			tp := kafkaconn.TopicPartition{Topic: t, Partition: p}
			tps = append(tps, tp)
			only[tp] = true
			st := d.parts[tp]
			if st == nil {
				continue
			}
			st.revoked = true
			st.waiting = nil
			if st.running > 0 {
				st.idle = make(chan struct{})
				idle = append(idle, st.idle)
			}
		}
	}
	d.dropQueuedLocked(func(ps *partState) bool { return ps.revoked })
	d.mu.Unlock()
	d.gate.Forget(tps...)
	d.pauses.forget(tps...)

	deadline := time.Now().Add(d.cfg.RevokeTimeout)
	wctx, cancel := context.WithDeadline(ctx, deadline.Add(-d.cfg.RevokeTimeout/4))
	abandoned := waitAll(wctx, idle)
	cancel()
	if abandoned > 0 {
		d.log.WarnContext(ctx, "revoke timed out waiting for requests in flight; their records will be re-delivered",
			"revoke_timeout", d.cfg.RevokeTimeout, "partitions_busy", abandoned)
	}
	if commit {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		d.commit(cctx, only)
		cancel()
	}
	d.mu.Lock()
	for _, tp := range tps {
		delete(d.parts, tp)
		p := strconv.Itoa(int(tp.Partition))
		d.m.held.DeleteLabelValues(tp.Topic, p)
		d.m.lag.DeleteLabelValues(tp.Topic, p)
	}
	d.mu.Unlock()
	d.log.Info("partitions released", "partitions", fmtTPs(m), "committed", commit)
}

// waitAll waits for every channel to close or ctx to end, and returns how
// many had not closed.
func waitAll(ctx context.Context, chs []chan struct{}) (open int) {
	for i, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			for _, ch := range chs[i:] {
				select {
				case <-ch:
				default:
					open++
				}
			}
			return open
		}
	}
	return 0
}

func fmtTPs(m map[string][]int32) string {
	var ts []string
	for t := range m {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	s := ""
	for _, t := range ts {
		ps := append([]int32(nil), m[t]...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		s += fmt.Sprintf("%s%v ", t, ps)
	}
	return s
}

// pause reasons of a partition.
const (
	pauseFull uint8 = 1 << iota // too many held records
	pauseDue                    // the head record is not due (tier gate)
)

// pauses combines the reasons a partition is paused, so the tier gate and
// the held-records cap do not resume each other's partitions.
type pauses struct {
	cl *kgo.Client
	mu sync.Mutex
	by map[kafkaconn.TopicPartition]uint8
}

// set turns reason on or off for tp, pausing or resuming its fetching
// when it is the first reason set or the last cleared.
func (p *pauses) set(tp kafkaconn.TopicPartition, reason uint8, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.by[tp]
	after := before &^ reason
	if on {
		after |= reason
	}
	if after == 0 {
		delete(p.by, tp)
	} else {
		p.by[tp] = after
	}
	switch {
	case before == 0 && after != 0:
		p.cl.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
	case before != 0 && after == 0:
		p.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
	}
}

func (p *pauses) forget(tps ...kafkaconn.TopicPartition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resume := map[string][]int32{}
	for _, tp := range tps {
		if p.by[tp] != 0 {
			resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
		}
		delete(p.by, tp)
	}
	if len(resume) > 0 {
		p.cl.ResumeFetchPartitions(resume)
	}
}

// duePauser is the gate's view of pauses.
type duePauser struct{ p *pauses }

func (d duePauser) PauseFetchPartitions(m map[string][]int32) map[string][]int32 {
	for t, ps := range m {
		for _, x := range ps {
			d.p.set(kafkaconn.TopicPartition{Topic: t, Partition: x}, pauseDue, true)
		}
	}
	return nil
}

func (d duePauser) ResumeFetchPartitions(m map[string][]int32) {
	for t, ps := range m {
		for _, x := range ps {
			d.p.set(kafkaconn.TopicPartition{Topic: t, Partition: x}, pauseDue, false)
		}
	}
}

var _ retrytiers.Pauser = duePauser{}

// Produce retry bounds: a failed produce of a retry record, dead letter or
// attempt record is retried after produceBackoff, doubling up to
// produceBackoffMax; a produce unanswered for produceSlow (kgo retries by
// itself while the broker is unreachable) counts as an outage.
var (
	produceBackoff    = 100 * time.Millisecond
	produceBackoffMax = 10 * time.Second
	produceSlow       = 15 * time.Second
)

var errProduceSlow = errors.New("no acknowledgement from Kafka yet")

// produce writes rec and returns it once the broker acknowledged it. A
// failure is retried with backoff until it succeeds, ctx ends (shutdown
// after DrainTimeout: the source record stays unfinished and is re-read
// after the restart) or the error is permanent (Run ends with it). Kafka
// being unreachable costs time, never a record.
func (d *Dispatcher) produce(ctx context.Context, rec *kgo.Record) (*kgo.Record, error) {
	tick := d.slowProduces.start()
	_, err := produceSync(ctx, d.cl, rec) // kgo acknowledges rec itself
	d.slowProduces.done(tick)
	return d.retryProduce(ctx, rec, err)
}

// retryProduce goes on from a produce of rec that ended with err (nil:
// acknowledged, rec is the acknowledged record) as produce does.
func (d *Dispatcher) retryProduce(ctx context.Context, rec *kgo.Record, err error) (*kgo.Record, error) {
	backoff := produceBackoff
	for {
		switch {
		case err == nil:
			d.produceOutage.ok(ctx, d.log)
			return rec, nil
		case ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed):
			return nil, err
		case kafkaconn.Permanent(err):
			d.fatal(fmt.Errorf("producing to %s: %w", rec.Topic, err))
			return nil, err
		}
		d.m.produceErrors.Inc() // the last failure, if any, is finish's to count
		d.produceOutage.fail(ctx, d.log, fmt.Errorf("producing to %s: %w", rec.Topic, err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, produceBackoffMax)
		tick := d.slowProduces.start()
		_, err = produceSync(ctx, d.cl, rec)
		d.slowProduces.done(tick)
	}
}

// produceSync is kgo's ProduceSync for one record without its per-call
// results slice, WaitGroup and promise closure: the waiter, its channel
// and its promise are pooled.
func produceSync(ctx context.Context, cl *kgo.Client, rec *kgo.Record) (*kgo.Record, error) {
	w := producePool.Get().(*produceWaiter)
	cl.Produce(ctx, rec, w.promise) // kgo calls the promise exactly once
	res := <-w.ch
	producePool.Put(w)
	return res.Record, res.Err
}

type produceWaiter struct {
	ch      chan kgo.ProduceResult
	promise func(*kgo.Record, error)
}

var producePool = sync.Pool{New: func() any {
	w := &produceWaiter{ch: make(chan kgo.ProduceResult, 1)}
	w.promise = func(r *kgo.Record, err error) { w.ch <- kgo.ProduceResult{Record: r, Err: err} }
	return w
}}

// outage tracks one kind of Kafka operation through a broker outage: one
// WARN when it starts failing, debug lines for the retries, one INFO when
// it succeeds again.
type outage struct {
	what     string
	failing  atomic.Bool // fast path of ok, called after every success
	mu       sync.Mutex
	since    time.Time // zero while it succeeds
	failures int
}

func (o *outage) fail(ctx context.Context, log *slog.Logger, err error) {
	o.mu.Lock()
	first := o.since.IsZero()
	if first {
		o.since = time.Now()
		o.failing.Store(true)
	}
	o.failures++
	o.mu.Unlock()
	if first {
		log.WarnContext(ctx, o.what+" failing; retrying until Kafka answers", "error", err)
		return
	}
	log.DebugContext(ctx, o.what+" failed again", "error", err)
}

func (o *outage) ok(ctx context.Context, log *slog.Logger) {
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return
	}
	since, n := o.since, o.failures
	o.since, o.failures = time.Time{}, 0
	o.failing.Store(false)
	o.mu.Unlock()
	log.InfoContext(ctx, o.what+" recovered", "after", time.Since(since).Round(time.Millisecond), "failures", n)
}

// Package sched is the dispatcher's scheduling core: it decides which
// record is sent next, which is deferred or skipped without a request,
// which partitions pause and resume, and what offset may be committed.
// It does no I/O and has no lock: one goroutine (the dispatcher's loop)
// owns a Core, feeds it inputs and carries out the commands it returns.
//
// Inputs: Assign, Revoke, Forget (partitions); Admit (records fetched,
// some of them marked Answered: finished at once, without a request);
// Sent (a started request went on the wire); RequestDone (a request
// ended: its slots are free); Retry (a FIFO record to attempt again in
// place); Finished (a record's
// produces were acknowledged, or it was abandoned); Tick (a deadline
// from NextWake came); Sweep (periodic: lingering accounts, shedding of
// accounts and endpoints that hold their slots); Stop (shutdown). Every
// input takes the time from the caller, so a test drives it with any
// clock. Outputs: the Commands each input returns (Start a request,
// Skip a record to a decision without one, Pause and Resume fetching a
// partition), NextWake (when to call Tick) and Watermarks (what to
// commit).
//
// The rules:
//
//   - Records queue per endpoint inside their partition; up to the
//     endpoint's MaxInFlight requests run per endpoint and Concurrency in
//     all, endpoints taking turns (round-robin) for free slots.
//
//   - An endpoint with a rate starts a request at most every 1/rate: over
//     it, it leaves the turns until its next start time (re-reading its
//     rate at least every RateRecheck).
//
//   - Fair share: while N accounts are active, an account starts a request
//     only while it holds fewer than max(ceil(Concurrency/N), MinShare);
//     an endpoint of an account at its share is parked until it is under.
//
//   - Deferral (a record to a retry tier without an attempt) happens only
//     to an endpoint or account that holds its slots: at its limit with no
//     request ended for HoldAfter (or, for an endpoint, waiting on its
//     rate). A healthy burst is never deferred: its records wait, the
//     partition fills to PartitionMaxHeld and its fetching pauses
//     (backpressure) until it is under half.
//
//   - A record with a due time in the future holds its partition (paused)
//     until then, and every record read after it waits behind it.
//
//   - A partition's watermark is its first unfinished record; nothing past
//     it is ever committed.
//
//   - A FIFO endpoint (Endpoint.FIFO) has one record out at a time: its
//     next record starts only once the one before is Finished. A failed
//     attempt comes back through Retry and is started again at its due
//     time, ahead of the endpoint's later records; its records are never
//     deferred or shed (that would reorder them). They count in their
//     partition's held records like any other: a FIFO endpoint whose head
//     waits can fill its partition and pause it.
//
// Files: core.go (inputs and commands), partition.go (held records,
// watermark, tier hold, pauses), endpoint.go (routing, queues, turns,
// deferral), fifo.go (ordered endpoints: one at a time, retries in place), rate.go (the rate limit), account.go (fair share, parking,
// holding and shedding), timers.go (the deadlines behind NextWake).
//
// Internal: only the dispatcher imports it; it imports neither net/http
// nor kgo.
package sched

import (
	"fmt"
	"time"
)

// Partition names a topic partition.
type Partition struct {
	Topic     string
	Partition int32
}

func (p Partition) String() string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }

// Record is what the core needs of one record read.
type Record struct {
	Part   Partition
	Offset int64
	Epoch  int32
	// Malformed records are not deliveries: they are skipped (Skip,
	// SkipMalformed) in their turn, after any record held before them.
	Malformed  bool
	EndpointID string
	Account    string
	// DueAt is when a retry record may be attempted; zero: at once.
	DueAt time.Time
	// Answered records were attempted already, by a previous owner of the
	// partition whose commit did not pass them (their attempt records
	// were read back): they finish on admission, without a command.
	Answered bool
	// Ref is the caller's own (the Kafka record and its decoding).
	Ref any
}

// Item is a record held by the core, from Admit until Finished.
type Item struct {
	Record
	part *part
	ep   *endpoint // while its request runs
	// fifo is its endpoint while it is that FIFO endpoint's head: started
	// and not finished (its request running, or waiting to be retried in
	// place). The endpoint starts nothing else meanwhile.
	fifo     *endpoint
	started  bool // handed out (Start or Skip): no longer queued or waiting
	queued   bool // in its endpoint's queue
	finished bool // done: its offset may be passed by the watermark
}

// Endpoint is what the core needs of an endpoint.
type Endpoint struct {
	ID      string
	Account string
	// Disabled endpoints receive nothing (SkipDisabled).
	Disabled bool
	// MaxInFlight overrides Config.MaxInFlight when positive; both are
	// capped at Config.MaxEndpointInFlight.
	MaxInFlight int
	// RatePerSec limits how often a request starts; 0: unlimited.
	RatePerSec float64
	// FIFO endpoints get one record at a time, in partition order: the
	// next starts only once the one before finished, a failure is
	// retried in place (Retry), and their records are never deferred.
	FIFO bool
}

// Lookup resolves an endpoint id; it must do no I/O (an in-memory index).
type Lookup func(id string) (Endpoint, bool)

// Reasons of Skip: a decision taken without a request.
const (
	SkipMalformed       = "malformed"
	SkipDeleted         = "endpoint_deleted"
	SkipDisabled        = "endpoint_disabled"
	SkipAccountMismatch = "account_mismatch"
	DeferBacklogFull    = "backlog_full"
	DeferFairShare      = "fair_share"
)

// Kind is a command's kind.
type Kind uint8

const (
	// Start: make Item's request, then call RequestDone and, once its
	// records are produced, Finished.
	Start Kind = iota + 1
	// Skip: finish Item without a request, for Reason (one of the Skip*
	// and Defer* constants), then call Finished.
	Skip
	// Pause and Resume fetching Part.
	Pause
	Resume
)

// Command is an output of the core, for its owner to carry out.
type Command struct {
	Kind   Kind
	Item   *Item
	Reason string // Skip
	Part   Partition
}

// Observer counts what the core decides (metrics). Its methods must not
// block or call back into the core.
type Observer interface {
	RateLimited()
	FairShareWait()
	Deferred(reason string)
	// Released: a record with a due time was routed, late past it.
	Released(p Partition, late time.Duration)
	// Answered: a record was admitted answered, and finished.
	Answered(p Partition)
}

// NopObserver observes nothing.
type NopObserver struct{}

func (NopObserver) RateLimited()                      {}
func (NopObserver) FairShareWait()                    {}
func (NopObserver) Deferred(string)                   {}
func (NopObserver) Released(Partition, time.Duration) {}
func (NopObserver) Answered(Partition)                {}

// Config bounds the core. Zero fields are invalid: the dispatcher's
// Config sets them.
type Config struct {
	Concurrency         int
	MaxInFlight         int
	MaxEndpointInFlight int
	PartitionMaxHeld    int
	EndpointBacklog     int
	AccountLinger       time.Duration
	// HoldAfter: an endpoint or account at its limit with no request
	// ended for this long holds its slots, and only then are its records
	// deferred.
	HoldAfter time.Duration
}

// Core is the scheduling state. Not safe for concurrent use: one
// goroutine owns it.
type Core struct {
	cfg    Config
	lookup Lookup
	obs    Observer

	parts map[Partition]*part
	eps   map[string]*endpoint
	accts map[string]*account
	ready []*endpoint // endpoints with queued work and a free slot, in turn
	slots int         // free request slots
	// active counts the busy and lingering accounts (the share divisor);
	// parked are the accounts with endpoints parked at their share.
	active   int
	parked   []*account
	timers   timers
	stopping bool
	out      []Command
}

// New returns an empty core.
func New(cfg Config, lookup Lookup, obs Observer) *Core {
	if obs == nil {
		obs = NopObserver{}
	}
	return &Core{
		cfg: cfg, lookup: lookup, obs: obs,
		parts: map[Partition]*part{},
		eps:   map[string]*endpoint{},
		accts: map[string]*account{},
		slots: cfg.Concurrency,
	}
}

// flush returns the commands of one input; the slice is reused by the
// next input.
func (c *Core) flush() []Command {
	out := c.out
	c.out = c.out[:0]
	return out
}

// Assign creates the state of new partitions.
func (c *Core) Assign(ps ...Partition) {
	for _, p := range ps {
		c.parts[p] = &part{id: p, lastSeen: -1, committed: -1}
	}
}

// Admit takes records read, in offset order per partition, and starts
// what it can.
func (c *Core) Admit(now time.Time, recs []Record) []Command {
	for i := range recs {
		c.admit(now, recs[i])
	}
	c.pump(now)
	return c.flush()
}

// RequestDone frees the slots of it's request. answered is false for a
// request that got no answer (a timeout, a refused connection): that is
// no progress of its endpoint and account (see Config.HoldAfter).
func (c *Core) RequestDone(now time.Time, it *Item, answered bool) []Command {
	ep := it.ep
	it.ep = nil
	c.slots++
	ep.inFlight--
	ep.acct.inFlight--
	if answered {
		ep.progress, ep.acct.progress = now, now
	}
	c.markReady(now, ep)
	c.touch(now, ep.acct)
	c.forgetEndpoint(now, ep)
	c.pump(now)
	return c.flush()
}

// Sent records that it's request went on the wire, its intent record
// acknowledged: the wait for Kafka before it is not its endpoint's doing,
// so it counts as progress of its endpoint and account (Config.HoldAfter
// runs from the send). It returns no command.
func (c *Core) Sent(now time.Time, it *Item) {
	ep := it.ep
	if ep == nil {
		return
	}
	if now.After(ep.progress) {
		ep.progress = now
	}
	if now.After(ep.acct.progress) {
		ep.acct.progress = now
	}
}

// Finished ends it: done (its offset may be committed) or abandoned (it
// stays below the watermark and is read again after a restart). A FIFO
// endpoint's next record may start from now on.
func (c *Core) Finished(now time.Time, it *Item, done bool) []Command {
	p := it.part
	if done {
		p.held.finish(it)
	}
	it.Ref = nil
	p.running--
	if p.full && p.held.len() < c.resumeHeld() && !p.revoked {
		p.full = false
		c.setPaused(p)
	}
	c.releaseFIFO(now, it)
	return c.flush()
}

// Tick handles the deadlines due at now: rate waits ended, tier holds due.
func (c *Core) Tick(now time.Time) []Command {
	c.timers.fire(now, func(e timer) {
		switch {
		case e.ep != nil:
			c.rateWoke(now, e.ep)
		case e.part != nil:
			c.dueWoke(now, e.part)
		case e.retry != nil:
			c.retryWoke(now, e.retry)
		}
	})
	c.pump(now)
	return c.flush()
}

// NextWake is when Tick must be called next; ok is false when nothing
// waits for a time.
func (c *Core) NextWake() (at time.Time, ok bool) { return c.timers.next() }

// Sweep is the periodic upkeep: accounts idle for AccountLinger stop
// counting (the others' share grows), endpoints kept only for their rate
// are forgotten, and the records of endpoints and accounts holding their
// slots are shed from full partitions and long backlogs.
func (c *Core) Sweep(now time.Time) []Command {
	c.sweepEndpoints(now)
	c.sweepAccounts(now)
	c.shedBacklogs(now)
	c.shedPartitions(now)
	c.pump(now)
	return c.flush()
}

// Revoke stops the partitions given: their queued and waiting records are
// dropped unstarted (they stay unfinished), their holds and pauses end
// (kgo keeps a pause across rebalances). Their running records still
// finish; Busy reports how many.
func (c *Core) Revoke(now time.Time, ps ...Partition) []Command {
	for _, id := range ps {
		p := c.parts[id]
		if p == nil {
			continue
		}
		p.revoked = true
		c.dropWaiting(p)
		c.dropRetries(now, p)
		p.full = false
		c.setPaused(p)
	}
	c.dropQueued(now)
	c.pump(now) // a FIFO endpoint whose dropped head held it may start
	return c.flush()
}

// Busy is how many records of the partitions given are running.
func (c *Core) Busy(ps ...Partition) int {
	n := 0
	for _, id := range ps {
		if p := c.parts[id]; p != nil {
			n += p.running
		}
	}
	return n
}

// Forget drops the partitions given (revoked and committed).
func (c *Core) Forget(ps ...Partition) {
	for _, id := range ps {
		delete(c.parts, id)
	}
}

// Stop drops every queued and waiting record and starts nothing more;
// running records still finish.
func (c *Core) Stop(now time.Time) []Command {
	c.stopping = true
	for _, p := range c.parts {
		c.dropWaiting(p)
		c.dropRetries(now, p)
	}
	c.dropQueued(now)
	return c.flush()
}

// Offset is a committable position.
type Offset struct {
	Part   Partition
	Offset int64
	Epoch  int32
}

// Watermarks returns the watermark of every partition (or of those only
// selects) that moved past its last commit.
func (c *Core) Watermarks(only func(Partition) bool) []Offset {
	var out []Offset
	for id, p := range c.parts {
		if only != nil && !only(id) {
			continue
		}
		if wm, ok := p.watermark(); ok && wm.Offset > p.committed {
			wm.Part = id
			out = append(out, wm)
		}
	}
	return out
}

// Committed records that off was committed.
func (c *Core) Committed(off Offset) {
	if p := c.parts[off.Part]; p != nil {
		p.committed = max(p.committed, off.Offset)
	}
}

// Active is the count of active accounts.
func (c *Core) Active() int { return c.active }

// PartitionStats describes one partition (gauges).
type PartitionStats struct {
	Part Partition
	Held int   // records read and not finished
	Lag  int64 // records from the watermark to the last read
	// Waiting are the records behind a held head not due yet.
	Waiting int
	// OldestDue is how long the oldest record due and not started has
	// been due (in an endpoint queue or behind a held head).
	OldestDue time.Duration
}

// Partitions calls f with the stats of every partition.
func (c *Core) Partitions(now time.Time, f func(PartitionStats)) {
	for id, p := range c.parts {
		st := PartitionStats{Part: id, Held: p.held.len(), Waiting: len(p.waiting)}
		if wm, ok := p.watermark(); ok {
			st.Lag = p.lastSeen + 1 - wm.Offset
		}
		for _, it := range p.held.all() {
			if !it.started && !it.finished && !it.DueAt.IsZero() && !it.DueAt.After(now) {
				st.OldestDue = max(st.OldestDue, now.Sub(it.DueAt))
			}
		}
		f(st)
	}
}

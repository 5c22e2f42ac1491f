package dispatcher

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkaconn"
)

// partState is what the dispatcher holds of one assigned partition. Every
// field is guarded by Dispatcher.mu.
type partState struct {
	tp kafkaconn.TopicPartition
	// pending are the records read and not finished, in offset order (and
	// finished ones behind the first, marked). The commit watermark is the
	// first unfinished one: a crash re-delivers from there, never skipping
	// an unfinished record.
	pending heldQueue
	// waiting is the tail of pending held back by the tier gate: its head
	// is not due yet, and everything after it waits behind it.
	waiting   []*item
	lastSeen  int64 // offset of the last record admitted, -1 before any
	lastEpoch int32
	committed int64 // last committed offset, -1 before any commit
	running   int   // items being attempted or finished (goroutines)
	revoked   bool
	// full: fetching it is paused for holding PartitionMaxHeld records,
	// until it holds fewer than half of them.
	full bool
	idle chan struct{} // closed when running drops to zero after revoke
}

// watermark is the offset to commit: the first unfinished record, or the
// one after the last record read.
func (ps *partState) watermark() (kgo.EpochOffset, bool) {
	if r := ps.pending.first(); r != nil {
		return kgo.EpochOffset{Epoch: r.epoch, Offset: r.offset}, true
	}
	if ps.lastSeen < 0 {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: ps.lastEpoch, Offset: ps.lastSeen + 1}, true
}

// item is one record in the dispatcher.
type item struct {
	rec    *kgo.Record
	d      *delivery.Delivery // nil until decoded
	part   *partState
	offset int64
	epoch  int32
	// started is set once it is handed to a worker or a finisher: it is no
	// longer waiting to be attempted.
	started bool
	// queued: it waits in its endpoint's queue.
	queued bool
	// finished: done, its offset may be committed (heldQueue).
	finished bool
}

// endpointState queues one endpoint's records; it exists only while the
// endpoint has queued or in-flight work. Guarded by Dispatcher.mu.
type endpointState struct {
	id       string
	acct     *accountState
	queue    []*item
	inFlight int
	max      int
	inReady  bool
	// parked: it could start a request but its account holds its fair
	// share; it waits in acct.parked, not in the ready list.
	parked bool
	// rate is the endpoint's requests per second (0: unlimited), read
	// from the index at every admission and at every rate wake-up.
	rate float64
	// lastStart is when its last request started (dispatcher clock).
	lastStart time.Time
	// wake is armed while it has queued work but must wait for its next
	// start time; it is not in the ready list meanwhile.
	wake *rateWake
}

// rateWake is the timer of an endpoint waiting for its next start time.
type rateWake struct{ timer clock.Timer }

// idleLocked reports whether ep holds nothing worth keeping: no work, no
// timer, and its rate allows a start now (a state created afresh would
// behave the same).
func (ep *endpointState) idleLocked(now time.Time) bool {
	return ep.inFlight == 0 && len(ep.queue) == 0 && ep.wake == nil &&
		rateDelay(ep.rate, ep.lastStart, now) == 0
}

// admitLocked takes one polled record.
func (d *Dispatcher) admitLocked(r *kgo.Record, now time.Time) {
	tp := kafkaconn.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	ps := d.parts[tp]
	if ps == nil || ps.revoked || d.stopping || r.Offset <= ps.lastSeen {
		return // not ours any more, or already read
	}
	ps.lastSeen, ps.lastEpoch = r.Offset, r.LeaderEpoch
	it := &item{rec: r, part: ps, offset: r.Offset, epoch: r.LeaderEpoch}
	ps.pending.push(it)
	if !ps.full && ps.pending.len() >= d.cfg.PartitionMaxHeld {
		ps.full = true
		d.pauses.set(tp, pauseFull, true)
	}
	if len(ps.waiting) > 0 {
		ps.waiting = append(ps.waiting, it)
		return
	}
	if !d.routeLocked(it, now) {
		ps.waiting = append(ps.waiting, it)
		d.gate.Hold(tp, it.d.DueAt)
	}
}

// routeLocked decodes it and queues it on its endpoint, or hands it to a
// finisher for a decision that needs no request. It returns false, doing
// nothing, when it is not due yet.
func (d *Dispatcher) routeLocked(it *item, now time.Time) bool {
	if it.d == nil {
		dl, err := delivery.Decode(it.rec)
		if err != nil {
			d.m.malformed.Inc()
			d.log.Warn("malformed delivery record, dead-lettering", "topic", it.rec.Topic,
				"partition", it.rec.Partition, "offset", it.rec.Offset, "error", err)
			d.startFinishLocked(it, result{malformed: err})
			return true
		}
		it.d = dl
	}
	if !it.d.DueAt.IsZero() {
		if it.d.DueAt.After(now) {
			return false
		}
		if _, ok := d.tierOf[it.rec.Topic]; ok {
			d.m.tierLateness.WithLabelValues(it.rec.Topic).Observe(now.Sub(it.d.DueAt).Seconds())
		}
	}
	t, ok := d.endpoints.Endpoint(it.d.EndpointID)
	if skip := skipClass(t, ok, it.d); skip != "" {
		d.startFinishLocked(it, result{skip: skip, startedAt: now})
		return true
	}
	ep := d.eps[t.ID]
	if ep == nil {
		ep = &endpointState{id: t.ID, acct: d.attachAccountLocked(t.Account)}
		d.eps[t.ID] = ep
	}
	ep.max = d.maxInFlight(t)
	ep.rate = t.RatePerSec
	if len(ep.queue) >= d.cfg.EndpointBacklog {
		d.startFinishLocked(it, result{deferred: ClassBacklogFull, startedAt: now})
		return true
	}
	if d.crowdingLocked(it.part, ep.acct) {
		d.m.fairShareDeferred.Inc()
		d.startFinishLocked(it, result{deferred: ClassFairShare, startedAt: now})
		return true
	}
	it.queued = true
	ep.queue = append(ep.queue, it)
	d.markReadyLocked(ep)
	return true
}

// skipClass returns why a record must not be sent to its endpoint (t, ok
// from the index), or "" when it may be: the endpoint is deleted or
// disabled, or the record's account (the hookd-account header) is not the
// endpoint's account. The last one is never sent anywhere: an endpoint id
// that now names another account's endpoint must not receive this
// account's events.
func skipClass(t Target, ok bool, dl *delivery.Delivery) string {
	switch {
	case !ok:
		return ClassDeleted
	case dl.Account != t.Account:
		return ClassAccountMismatch
	case t.Disabled:
		return ClassDisabled
	}
	return ""
}

// maxInFlight is t's own in-flight limit, or the default, never above the
// operator's MaxEndpointInFlight.
func (d *Dispatcher) maxInFlight(t Target) int {
	n := d.cfg.MaxInFlight
	if t.MaxInFlight > 0 {
		n = t.MaxInFlight
	}
	return min(n, d.cfg.MaxEndpointInFlight)
}

// onDue is the gate's timer: release what is due, hold again on the next
// head that is not.
func (d *Dispatcher) onDue(tp kafkaconn.TopicPartition) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ps := d.parts[tp]
	if ps == nil || ps.revoked || d.stopping {
		return
	}
	now := d.clock.Now()
	w := ps.waiting
	ps.waiting = nil
	for i, it := range w {
		if !d.routeLocked(it, now) {
			ps.waiting = w[i:]
			d.gate.Hold(tp, it.d.DueAt)
			break
		}
	}
	if len(ps.waiting) == 0 {
		d.gate.Release(tp)
	}
	d.pumpLocked()
}

func (d *Dispatcher) markReadyLocked(ep *endpointState) {
	if !ep.inReady && !ep.parked && ep.wake == nil && len(ep.queue) > 0 && ep.inFlight < ep.max {
		ep.inReady = true
		d.ready = append(d.ready, ep)
		ep.acct.ready++
		d.touchAccountLocked(ep.acct)
	}
}

// popReadyLocked takes the first endpoint of the ready list.
func (d *Dispatcher) popReadyLocked() *endpointState {
	ep := d.ready[0]
	d.ready[0] = nil
	d.ready = d.ready[1:]
	ep.inReady = false
	ep.acct.ready--
	return ep
}

// pumpLocked starts requests while global slots are free, taking endpoints
// round-robin so a busy endpoint cannot starve the others. An endpoint
// over its rate starts nothing: it leaves the ready list with a timer set
// for its next start time, and its records wait in its queue. An endpoint
// whose account holds its fair share starts nothing either: it is parked
// with its account until the account is under its share again.
func (d *Dispatcher) pumpLocked() {
	for d.slots > 0 && !d.stopping {
		if len(d.ready) == 0 {
			if !d.unparkLocked() {
				return
			}
			continue
		}
		ep := d.popReadyLocked()
		d.startLocked(ep)
		d.touchAccountLocked(ep.acct)
	}
}

// startLocked starts ep's next request if its limits allow.
func (d *Dispatcher) startLocked(ep *endpointState) {
	if len(ep.queue) == 0 || ep.inFlight >= ep.max || ep.wake != nil {
		return
	}
	if ep.acct.inFlight >= d.shareLocked() {
		d.parkLocked(ep)
		return
	}
	if ep.rate > 0 {
		now := d.clock.Now()
		if wait := rateDelay(ep.rate, ep.lastStart, now); wait > 0 {
			d.waitRateLocked(ep, wait)
			return
		}
		ep.lastStart = now
	}
	it := ep.queue[0]
	ep.queue[0] = nil
	ep.queue = ep.queue[1:]
	it.queued = false
	ep.inFlight++
	ep.acct.inFlight++
	d.slots--
	it.started = true
	it.part.running++
	d.m.inFlight.Inc()
	d.wg.Add(1)
	switch {
	case d.keeping && d.kept.it == nil:
		d.kept = job{it, ep} // the worker that freed a slot runs it next
	default:
		d.handoffLocked(job{it, ep})
	}
	d.markReadyLocked(ep)
}

// job is one request for a worker.
type job struct {
	it *item
	ep *endpointState
}

// workerIdle is how long a worker waits idle for its next request before
// it is retired (checked every CommitInterval).
const workerIdle = 10 * time.Second

// worker runs j, then the requests handed to it while it waits idle, for
// up to workerIdle between them, until the dispatcher's work ends. A
// request started on a worker runs on the stack its predecessors grew
// through the HTTP client, instead of a new goroutine growing its own.
// Every request is counted in d.wg by startLocked until its record is
// complete, not the worker: an idle worker holds up no drain.
func (d *Dispatcher) worker(j job) {
	w := &idleWorker{ch: make(chan job, 1)}
	for {
		var ok bool
		if j, ok = d.work(j.it, j.ep); ok {
			continue
		}
		d.mu.Lock()
		if d.workersDone {
			d.mu.Unlock()
			return
		}
		w.since = time.Now()
		d.idleWorkers = append(d.idleWorkers, w)
		d.mu.Unlock()
		if j = <-w.ch; j.it == nil {
			return // retired
		}
	}
}

// idleWorker is a worker waiting for its next request on ch; a zero job
// retires it.
type idleWorker struct {
	ch    chan job // buffered: a handoff never blocks
	since time.Time
}

// handoffLocked gives j to the worker idle the shortest time (its stack
// and buffers are the likeliest still in the CPU's caches; the longest
// idle are the ones retireWorkersLocked ends), or to a new one.
func (d *Dispatcher) handoffLocked(j job) {
	n := len(d.idleWorkers)
	if n == 0 {
		go d.worker(j)
		return
	}
	w := d.idleWorkers[n-1]
	d.idleWorkers[n-1] = nil
	d.idleWorkers = d.idleWorkers[:n-1]
	w.ch <- j
}

// retireWorkersLocked ends the workers idle for workerIdle, or every idle
// worker when all is set (the dispatcher's work ended); after all, no
// worker waits idle again.
func (d *Dispatcher) retireWorkersLocked(now time.Time, all bool) {
	d.workersDone = d.workersDone || all
	n := 0
	for n < len(d.idleWorkers) && (all || now.Sub(d.idleWorkers[n].since) >= workerIdle) {
		d.idleWorkers[n].ch <- job{}
		n++
	}
	rest := copy(d.idleWorkers, d.idleWorkers[n:])
	clear(d.idleWorkers[rest:])
	d.idleWorkers = d.idleWorkers[:rest]
}

// work makes one attempt, frees its slots, then finishes the record; the
// record's completion (finish) ends its count in d.wg. The first request
// the freed slots start is returned (ok) for the worker to run next,
// instead of waking another worker for it, when the record was delivered:
// its finish waits for no acknowledgement (a retry record or dead letter
// would hold the next request back that long).
func (d *Dispatcher) work(it *item, ep *endpointState) (next job, ok bool) {
	res := d.attempt(it)
	d.mu.Lock()
	d.m.inFlight.Dec()
	ep.inFlight--
	ep.acct.inFlight--
	d.slots++
	d.markReadyLocked(ep)
	d.touchAccountLocked(ep.acct)
	d.forgetEndpointLocked(ep)
	d.keeping = res.attempted && !res.aborted && res.verdict.Outcome == attempt.OutcomeDelivered
	d.pumpLocked()
	next, d.kept, d.keeping = d.kept, job{}, false
	d.mu.Unlock()
	d.finish(it, res)
	return next, next.it != nil
}

// waitRateLocked arms ep's timer for its next start time, or for
// rateRecheck if sooner, when it reads its rate again: no busy loop, and
// a rate changed meanwhile applies within rateRecheck.
func (d *Dispatcher) waitRateLocked(ep *endpointState, wait time.Duration) {
	d.m.rateLimited.Inc()
	w := &rateWake{}
	ep.wake = w
	w.timer = d.clock.AfterFunc(min(wait, rateRecheck), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if ep.wake != w {
			return
		}
		ep.wake = nil
		if d.eps[ep.id] != ep || d.stopping {
			return
		}
		if t, ok := d.endpoints.Endpoint(ep.id); ok {
			ep.rate = t.RatePerSec
		}
		d.markReadyLocked(ep)
		d.forgetEndpointLocked(ep)
		d.pumpLocked()
	})
}

// forgetEndpointLocked drops ep's state once it is idle. An endpoint whose
// rate still forbids a start is kept (so a new record cannot skip the
// spacing) until sweepEndpointsLocked finds it idle.
func (d *Dispatcher) forgetEndpointLocked(ep *endpointState) {
	if d.eps[ep.id] != ep {
		return
	}
	if ep.inFlight == 0 && len(ep.queue) == 0 && ep.wake == nil {
		if ep.rate > 0 && !ep.idleLocked(d.clock.Now()) {
			return
		}
		delete(d.eps, ep.id)
		d.detachAccountLocked(ep.acct)
	}
}

// sweepEndpointsLocked forgets the endpoints kept only for their rate.
func (d *Dispatcher) sweepEndpointsLocked(now time.Time) {
	for id, ep := range d.eps {
		if ep.idleLocked(now) {
			delete(d.eps, id)
			d.detachAccountLocked(ep.acct)
		}
	}
}

// startFinishLocked finishes it without a request, in its own goroutine
// (it produces to Kafka).
func (d *Dispatcher) startFinishLocked(it *item, res result) {
	it.started = true
	it.part.running++
	d.wg.Add(1)
	go d.finish(it, res)
}

// doneLocked ends it: done (its offset may be committed) or abandoned
// (it stays below the watermark and is re-read after a restart).
func (d *Dispatcher) doneLocked(it *item, done bool) {
	ps := it.part
	if done {
		ps.pending.finish(it)
	}
	it.rec, it.d = nil, nil
	ps.running--
	if ps.full && ps.pending.len() < d.resumeHeld() && !ps.revoked {
		ps.full = false
		d.pauses.set(ps.tp, pauseFull, false)
	}
	if ps.running == 0 && ps.idle != nil {
		close(ps.idle)
		ps.idle = nil
	}
}

// resumeHeld is the count of held records under which a partition paused
// for holding PartitionMaxHeld is resumed: half of it, and at least 1 (half
// of 1 is 0 in integers: a partition of PartitionMaxHeld 1 was never
// resumed, its first record delivered and none after it read).
func (d *Dispatcher) resumeHeld() int { return max(d.cfg.PartitionMaxHeld/2, 1) }

// dropQueuedLocked removes the queued, unstarted items of the partitions
// matching drop from every endpoint queue. They stay unfinished: the next
// owner reads them again from the committed watermark.
func (d *Dispatcher) dropQueuedLocked(drop func(*partState) bool) {
	for _, ep := range d.eps {
		q := ep.queue[:0]
		for _, it := range ep.queue {
			if drop(it.part) {
				it.queued = false
			} else {
				q = append(q, it)
			}
		}
		clear(ep.queue[len(q):])
		ep.queue = q
	}
	ready := d.ready[:0]
	for _, ep := range d.ready {
		if len(ep.queue) > 0 {
			ready = append(ready, ep)
		} else {
			ep.inReady = false
			ep.acct.ready--
			d.touchAccountLocked(ep.acct)
		}
	}
	clear(d.ready[len(ready):])
	d.ready = ready
	d.dropParkedLocked()
	for _, ep := range d.eps {
		d.forgetEndpointLocked(ep)
	}
}

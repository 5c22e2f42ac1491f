package dispatcher

import (
	"time"

	"github.com/hookd/hookd/dispatcher/internal/sched"
)

// The loop is the one goroutine that owns the scheduling core
// (internal/sched): every input reaches it through a channel, and it
// carries out the core's commands. Nothing else touches the core, so no
// lock guards it.
//
// Inputs: the poll loop's records and the rebalance callbacks (do), a
// request's end and a record's finish (events, from the goroutines of
// requests and produces), the core's own deadlines (wake) and the
// periodic upkeep (do, from background). Commands: start a request (jobs,
// for the requesters: attempt.go, then finish.go), finish a record
// without one (finish.go), pause or resume fetching a partition (kgo).

// event is a request's end or a record's finish.
type event struct {
	it       *sched.Item
	sent     bool // the request went on the wire (its intent acknowledged)
	finished bool // false: the request ended (ok: it got an answer)
	ok       bool // finished: done (false: abandoned, read again later)
	// A FIFO endpoint's record (fifo.go): release, delivered (its
	// endpoint may go on); retry, failed, to attempt again at due.
	release, retry bool
	due            time.Time
}

// eventBuffer lets the goroutines of requests and produces hand over an
// event without waiting for the loop.
const eventBuffer = 4096

// idleWaiter is a revoke waiting for its partitions' running records.
type idleWaiter struct {
	parts []sched.Partition
	idle  chan struct{}
}

// runLoop owns the core until stop is closed.
func (d *Dispatcher) runLoop(stop <-chan struct{}) {
	defer close(d.loopDone)
	for {
		select {
		case <-stop:
			d.setWake(time.Time{}, false)
			return
		case ev := <-d.events:
			d.handle(ev)
			d.drainEvents()
		case f := <-d.calls:
			d.drainEvents() // what happened before the call was made
			f()
		case <-d.wake:
			d.armedAt = time.Time{}
			d.apply(d.core.Tick(d.clock.Now()))
		}
		at, ok := d.core.NextWake()
		d.setWake(at, ok)
		d.checkIdle()
	}
}

// drainEvents handles the events already sent.
func (d *Dispatcher) drainEvents() {
	for {
		select {
		case ev := <-d.events:
			d.handle(ev)
		default:
			return
		}
	}
}

func (d *Dispatcher) handle(ev event) {
	if ev.sent {
		d.core.Sent(d.clock.Now(), ev.it)
		return
	}
	switch {
	case ev.retry:
		d.apply(d.core.Retry(d.clock.Now(), ev.it, ev.due))
		return
	case ev.release:
		d.apply(d.core.Release(d.clock.Now(), ev.it))
		return
	}
	if ev.finished {
		d.apply(d.core.Finished(d.clock.Now(), ev.it, ev.ok))
		return
	}
	d.m.inFlight.Dec()
	d.apply(d.core.RequestDone(d.clock.Now(), ev.it, ev.ok))
}

// do runs f on the loop and returns once it ran; false if the loop has
// ended (f did not run).
func (d *Dispatcher) do(f func()) bool {
	done := make(chan struct{})
	select {
	case d.calls <- func() { f(); close(done) }:
	case <-d.loopDone:
		return false
	}
	<-done
	return true
}

// apply carries out the core's commands.
func (d *Dispatcher) apply(cmds []sched.Command) {
	for _, c := range cmds {
		switch c.Kind {
		case sched.Start:
			d.m.inFlight.Inc()
			d.wg.Add(1)
			d.jobs <- c.Item
		case sched.Skip:
			d.wg.Add(1)
			go d.finish(c.Item, skipResult(c.Reason))
		case sched.Pause:
			d.cl.PauseFetchPartitions(map[string][]int32{c.Part.Topic: {c.Part.Partition}})
		case sched.Resume:
			d.cl.ResumeFetchPartitions(map[string][]int32{c.Part.Topic: {c.Part.Partition}})
		}
	}
}

// skipResult is the result of a record finished without a request.
func skipResult(reason string) result {
	switch reason {
	case sched.DeferBacklogFull:
		return result{deferred: ClassBacklogFull}
	case sched.DeferFairShare:
		return result{deferred: ClassFairShare}
	case sched.SkipMalformed:
		return result{malformed: true}
	case sched.SkipDisabled:
		return result{skip: ClassDisabled}
	case sched.SkipAccountMismatch:
		return result{skip: ClassAccountMismatch}
	}
	return result{skip: ClassDeleted}
}

// setWake keeps one timer (on d.clock) armed at the core's next deadline.
func (d *Dispatcher) setWake(at time.Time, ok bool) {
	if ok && d.wakeTimer != nil && at.Equal(d.armedAt) {
		return
	}
	if d.wakeTimer != nil {
		d.wakeTimer.Stop()
		d.wakeTimer, d.armedAt = nil, time.Time{}
	}
	if !ok {
		return
	}
	d.armedAt = at
	d.wakeTimer = d.clock.AfterFunc(at.Sub(d.clock.Now()), func() {
		select {
		case d.wake <- struct{}{}:
		default: // one wake-up pending is enough
		}
	})
}

// waitIdle returns a channel closed once no record of parts is running.
func (d *Dispatcher) waitIdle(parts []sched.Partition) chan struct{} {
	w := idleWaiter{parts: parts, idle: make(chan struct{})}
	d.idleWaiters = append(d.idleWaiters, w)
	d.checkIdle()
	return w.idle
}

func (d *Dispatcher) checkIdle() {
	if len(d.idleWaiters) == 0 {
		return
	}
	keep := d.idleWaiters[:0]
	for _, w := range d.idleWaiters {
		if d.core.Busy(w.parts...) == 0 {
			close(w.idle)
		} else {
			keep = append(keep, w)
		}
	}
	clear(d.idleWaiters[len(keep):])
	d.idleWaiters = keep
}

// observer counts the core's decisions in the dispatcher's metrics.
type observer struct {
	m      *metrics
	tierOf map[string]int
}

func (o observer) RateLimited()   { o.m.rateLimited.Inc() }
func (o observer) FairShareWait() { o.m.fairShareWaits.Inc() }

func (o observer) Deferred(reason string) {
	if reason == sched.DeferFairShare {
		o.m.fairShareDeferred.Inc()
	}
}

func (o observer) Released(p sched.Partition, late time.Duration) {
	if _, ok := o.tierOf[p.Topic]; ok {
		o.m.tierLateness.WithLabelValues(p.Topic).Observe(late.Seconds())
	}
}

func (o observer) Answered(sched.Partition) { o.m.resumeSkipped.Inc() }

var _ sched.Observer = observer{}

// lookup adapts the endpoint index to the core.
func lookup(eps Endpoints) sched.Lookup {
	return func(id string) (sched.Endpoint, bool) {
		t, ok := eps.Endpoint(id)
		return sched.Endpoint{ID: t.ID, Account: t.Account, Disabled: t.Disabled,
			MaxInFlight: t.MaxInFlight, RatePerSec: t.RatePerSec,
			FIFO: t.FIFO}, ok
	}
}

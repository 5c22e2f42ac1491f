package sched

import "time"

// endpoint queues one endpoint's records; it exists while the endpoint
// has queued or in-flight work (or its rate forbids a start now).
type endpoint struct {
	id       string
	acct     *account
	queue    []*Item
	inFlight int
	max      int
	inReady  bool
	// parked: it could start a request but its account holds its share;
	// it waits in acct.parked, not in the ready list.
	parked bool
	rate   float64 // requests per second, 0: unlimited
	// lastStart is when its last request started; progress when it last
	// got an answer or started from idle (holding).
	lastStart, progress time.Time
	// wake is armed while it waits for its next start time; it is not in
	// the ready list meanwhile.
	wake *timer
	// fifo: one record out at a time (fifo.go). head is the record out,
	// from its start to its finish; retryWake is armed while head waits to
	// be retried in place.
	fifo      bool
	head      *Item
	retryWake *timer
}

// idle reports whether ep holds nothing worth keeping: no work, no timer,
// and its rate allows a start now.
func (ep *endpoint) idle(now time.Time) bool {
	return ep.inFlight == 0 && len(ep.queue) == 0 && ep.wake == nil &&
		ep.head == nil && ep.retryWake == nil &&
		rateDelay(ep.rate, ep.lastStart, now) == 0
}

// holding reports whether ep is held back by its own limits: waiting for
// its rate, or at its in-flight limit with no answer for HoldAfter. Only
// then may its records be deferred for its backlog.
func (c *Core) holding(ep *endpoint, now time.Time) bool {
	return ep.wake != nil || (ep.inFlight >= ep.max && now.Sub(ep.progress) >= c.cfg.HoldAfter)
}

// route queues it on its endpoint, or skips it for a decision that needs
// no request. It returns false, doing nothing, when it is not due yet.
func (c *Core) route(now time.Time, it *Item) bool {
	if it.Malformed {
		c.skip(it, SkipMalformed)
		return true
	}
	if !it.DueAt.IsZero() {
		if it.DueAt.After(now) {
			return false
		}
		c.obs.Released(it.Part, now.Sub(it.DueAt))
	}
	t, ok := c.lookup(it.EndpointID)
	if why := skipReason(t, ok, it.Account); why != "" {
		c.skip(it, why)
		return true
	}
	ep := c.endpoint(t)
	if why := c.deferral(now, it.part, ep); why != "" {
		c.obs.Deferred(why)
		c.skip(it, why)
		return true
	}
	it.queued = true
	ep.queue = append(ep.queue, it)
	c.markReady(now, ep)
	return true
}

// deferral is why a record for ep read into p goes to a retry tier
// without an attempt, or "": its endpoint's backlog is full and the
// endpoint holds back (its rate, or its slots held), or its account holds
// its share while others are active and p is half full.
func (c *Core) deferral(now time.Time, p *part, ep *endpoint) string {
	switch {
	case ep.fifo:
		return "" // a FIFO endpoint's records wait: a tier would reorder them
	case len(ep.queue) >= c.cfg.EndpointBacklog && c.holding(ep, now):
		return DeferBacklogFull
	case c.crowding(now, p, ep.acct):
		return DeferFairShare
	}
	return ""
}

// skipReason is why a record of account must not be sent to its endpoint
// (t, ok from the lookup), or "".
func skipReason(t Endpoint, ok bool, account string) string {
	switch {
	case !ok:
		return SkipDeleted
	case account != t.Account:
		return SkipAccountMismatch
	case t.Disabled:
		return SkipDisabled
	}
	return ""
}

// endpoint returns t's state, created if needed, with its limits as the
// lookup has them now.
func (c *Core) endpoint(t Endpoint) *endpoint {
	ep := c.eps[t.ID]
	if ep == nil {
		ep = &endpoint{id: t.ID, acct: c.attach(t.Account)}
		c.eps[t.ID] = ep
	}
	ep.max = c.maxInFlight(t)
	ep.rate = t.RatePerSec
	if !ep.fifo || ep.head == nil {
		// An endpoint switched while it has a record out keeps its mode
		// until that record finishes.
		ep.fifo = t.FIFO
	}
	if ep.fifo {
		ep.max = 1
	}
	return ep
}

// maxInFlight is t's own in-flight limit, or the default, never above
// MaxEndpointInFlight.
func (c *Core) maxInFlight(t Endpoint) int {
	n := c.cfg.MaxInFlight
	if t.MaxInFlight > 0 {
		n = t.MaxInFlight
	}
	return min(n, c.cfg.MaxEndpointInFlight)
}

// markReady puts ep in the ready list if it can start a request; its
// account is then active (touch) before any share is computed again.
func (c *Core) markReady(now time.Time, ep *endpoint) {
	if !ep.inReady && !ep.parked && ep.wake == nil && ep.head == nil &&
		len(ep.queue) > 0 && ep.inFlight < ep.max {
		ep.inReady = true
		c.ready = append(c.ready, ep)
		ep.acct.ready++
		c.touch(now, ep.acct)
	}
}

// pump starts requests while slots are free, endpoints taking turns.
func (c *Core) pump(now time.Time) {
	for c.slots > 0 && !c.stopping {
		if len(c.ready) == 0 && !c.unpark(now) {
			return
		}
		if len(c.ready) == 0 {
			continue
		}
		ep := c.ready[0]
		c.ready[0] = nil
		c.ready = c.ready[1:]
		ep.inReady = false
		ep.acct.ready--
		c.start(now, ep)
		c.touch(now, ep.acct)
	}
}

// start starts ep's next request if its limits allow: over its rate it
// waits for its next start time; at its account's share it is parked.
func (c *Core) start(now time.Time, ep *endpoint) {
	if len(ep.queue) == 0 || ep.inFlight >= ep.max || ep.wake != nil || ep.head != nil {
		return
	}
	if ep.acct.inFlight >= c.share() {
		c.park(ep)
		return
	}
	if wait := rateDelay(ep.rate, ep.lastStart, now); wait > 0 {
		c.obs.RateLimited()
		c.timers.set(&ep.wake, timer{at: now.Add(min(wait, RateRecheck)), ep: ep})
		return
	}
	it := ep.queue[0]
	ep.queue[0] = nil
	ep.queue = ep.queue[1:]
	it.queued, it.started, it.ep = false, true, ep
	it.part.running++
	if ep.inFlight == 0 {
		ep.progress = now
	}
	if ep.acct.inFlight == 0 {
		ep.acct.progress = now
	}
	ep.inFlight++
	ep.acct.inFlight++
	c.slots--
	ep.lastStart = now
	if ep.fifo {
		ep.head, it.fifo = it, ep
	}
	c.out = append(c.out, Command{Kind: Start, Item: it})
	c.markReady(now, ep)
}

// rateWoke is the end of ep's wait for its rate: its rate is read again
// (an endpoint update applies within RateRecheck) and it takes turns.
func (c *Core) rateWoke(now time.Time, ep *endpoint) {
	if c.eps[ep.id] != ep || c.stopping {
		return
	}
	if t, ok := c.lookup(ep.id); ok {
		ep.rate = t.RatePerSec
	}
	c.markReady(now, ep)
	c.forgetEndpoint(now, ep)
}

// forgetEndpoint drops ep's state once it is idle.
func (c *Core) forgetEndpoint(now time.Time, ep *endpoint) {
	if c.eps[ep.id] == ep && ep.idle(now) {
		delete(c.eps, ep.id)
		c.detach(ep.acct)
	}
}

// sweepEndpoints forgets the endpoints kept only for their rate.
func (c *Core) sweepEndpoints(now time.Time) {
	for _, ep := range c.eps {
		c.forgetEndpoint(now, ep)
	}
}

// dropQueued removes the queued records of revoked partitions (all of
// them when stopping) from every endpoint queue: they stay unfinished,
// for the next owner to read again from the watermark.
func (c *Core) dropQueued(now time.Time) {
	for _, ep := range c.eps {
		c.filterQueue(ep, func(it *Item) bool {
			if c.stopping || it.part.revoked {
				it.queued = false
			}
			return it.queued
		})
	}
	c.tidy(now)
}

// filterQueue keeps the records of ep's queue that keep says to.
func (c *Core) filterQueue(ep *endpoint, keep func(*Item) bool) {
	q := ep.queue[:0]
	for _, it := range ep.queue {
		if keep(it) {
			q = append(q, it)
		}
	}
	clear(ep.queue[len(q):])
	ep.queue = q
}

// tidy takes the endpoints whose queues emptied out of the ready list and
// the parked lists, and forgets those idle.
func (c *Core) tidy(now time.Time) {
	ready := c.ready[:0]
	for _, ep := range c.ready {
		if len(ep.queue) > 0 {
			ready = append(ready, ep)
		} else {
			ep.inReady = false
			ep.acct.ready--
			c.touch(now, ep.acct)
		}
	}
	clear(c.ready[len(ready):])
	c.ready = ready
	c.dropParked(now)
	for _, ep := range c.eps {
		if len(ep.queue) == 0 {
			c.timers.stop(&ep.wake)
		}
		c.forgetEndpoint(now, ep)
	}
}

// shedBacklogs defers the records of endpoint queues past EndpointBacklog,
// newest first, when their endpoint holds back: a backlog read while its
// endpoint still answered is shed once it stops.
func (c *Core) shedBacklogs(now time.Time) {
	shed := false
	for _, ep := range c.eps {
		if ep.fifo || len(ep.queue) <= c.cfg.EndpointBacklog || !c.holding(ep, now) {
			continue
		}
		for _, it := range ep.queue[c.cfg.EndpointBacklog:] {
			it.queued = false
			c.obs.Deferred(DeferBacklogFull)
			c.skip(it, DeferBacklogFull)
		}
		clear(ep.queue[c.cfg.EndpointBacklog:])
		ep.queue = ep.queue[:c.cfg.EndpointBacklog]
		shed = true
	}
	if shed {
		c.tidy(now)
	}
}

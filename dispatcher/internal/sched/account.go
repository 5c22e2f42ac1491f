package sched

import "time"

// MinShare is the least fair share of an account, however many accounts
// are active: enough for a few requests in parallel.
const MinShare = 4

// account is one account's hold on the request slots. It exists while an
// endpoint state of the account exists or while the account lingers.
type account struct {
	id       string
	inFlight int // requests in flight
	ready    int // its endpoints in the ready list
	// parked are its endpoints that could start a request but wait for
	// the account to be under its share again.
	parked   []*endpoint
	inParked bool // in Core.parked
	refs     int  // endpoint states pointing at it
	// busy: requests in flight, or endpoints ready or parked. An account
	// busy, or lingering (not busy for less than AccountLinger since
	// idleAt), is active: counted in Core.active.
	busy, lingering bool
	idleAt          time.Time
	// progress is when one of its requests last got an answer, or started
	// from idle (holding).
	progress time.Time
}

// attach returns the state of account id for a new endpoint state.
func (c *Core) attach(id string) *account {
	a := c.accts[id]
	if a == nil {
		a = &account{id: id}
		c.accts[id] = a
	}
	a.refs++
	return a
}

// detach is the end of an endpoint state of a.
func (c *Core) detach(a *account) {
	a.refs--
	c.dropAccount(a)
}

// dropAccount forgets a once nothing holds it and it counts for nothing.
func (c *Core) dropAccount(a *account) {
	if a.refs == 0 && !a.busy && !a.lingering && c.accts[a.id] == a {
		delete(c.accts, a.id)
	}
}

// touch updates a's busy state and the count of active accounts. An
// account that stops being busy lingers: it still counts, so the others'
// share stays put in the gaps between its records.
func (c *Core) touch(now time.Time, a *account) {
	busy := a.inFlight > 0 || a.ready > 0 || len(a.parked) > 0
	if busy == a.busy {
		return
	}
	a.busy = busy
	switch {
	case busy && a.lingering:
		a.lingering = false
	case busy:
		c.active++
	default:
		a.lingering, a.idleAt = true, now
	}
}

// share is how many requests one account may have in flight now: all of
// Concurrency when it is the only active account, else
// ceil(Concurrency/active), at least MinShare.
func (c *Core) share() int {
	if c.active <= 1 {
		return c.cfg.Concurrency
	}
	return max((c.cfg.Concurrency+c.active-1)/c.active, MinShare)
}

// Share is the fair share of an account now.
func (c *Core) Share() int { return c.share() }

// holdingShare reports whether a holds its share of slots while others
// are active, with no answer for HoldAfter: only then are its records
// deferred (fair_share) to keep a partition flowing.
func (c *Core) holdingShare(now time.Time, a *account) bool {
	return c.active > 1 && a.inFlight >= c.share() && now.Sub(a.progress) >= c.cfg.HoldAfter
}

// crowding reports whether a record of a must not be queued in p: p is
// half full and a holds its share. Queued, a's records would fill p and
// pause it, holding up the other accounts' records behind them for as
// long as a's requests take; they go to the first retry tier instead.
func (c *Core) crowding(now time.Time, p *part, a *account) bool {
	return p.held.len() >= c.cfg.PartitionMaxHeld/2 && c.holdingShare(now, a)
}

// park sets ep aside until its account is under its share.
func (c *Core) park(ep *endpoint) {
	a := ep.acct
	ep.parked = true
	a.parked = append(a.parked, ep)
	if !a.inParked {
		a.inParked = true
		c.parked = append(c.parked, a)
	}
	c.obs.FairShareWait()
}

// unpark puts back in the ready list the parked endpoints of every
// account now under its share, and reports whether there were any. It
// runs only when slots are free and nothing else is ready, so the parked
// accounts are few (each holds at least a share) and the ready path
// stays O(1).
func (c *Core) unpark(now time.Time) bool {
	share := c.share()
	moved := false
	keep := c.parked[:0]
	for _, a := range c.parked {
		if a.inFlight >= share {
			keep = append(keep, a)
			continue
		}
		for _, ep := range a.parked {
			ep.parked = false
			c.markReady(now, ep)
		}
		clear(a.parked)
		a.parked = a.parked[:0]
		a.inParked = false
		c.touch(now, a)
		moved = true
	}
	clear(c.parked[len(keep):])
	c.parked = keep
	return moved
}

// dropParked unparks the endpoints left with an empty queue.
func (c *Core) dropParked(now time.Time) {
	keep := c.parked[:0]
	for _, a := range c.parked {
		left := a.parked[:0]
		for _, ep := range a.parked {
			if len(ep.queue) > 0 {
				left = append(left, ep)
			} else {
				ep.parked = false
			}
		}
		clear(a.parked[len(left):])
		a.parked = left
		if len(left) > 0 {
			keep = append(keep, a)
		} else {
			a.inParked = false
		}
		c.touch(now, a)
	}
	clear(c.parked[len(keep):])
	c.parked = keep
}

// sweepAccounts ends the lingering of accounts idle for AccountLinger and
// forgets those nothing holds.
func (c *Core) sweepAccounts(now time.Time) {
	for _, a := range c.accts {
		if a.lingering && now.Sub(a.idleAt) >= c.cfg.AccountLinger {
			a.lingering = false
			c.active--
		}
		c.dropAccount(a)
	}
}

// shedPartitions empties the partitions paused full of the queued records
// of accounts holding their share, newest first, to just below half of
// PartitionMaxHeld (where fetching resumes): a partition an account
// filled while it was alone, or while it still answered, flows again.
func (c *Core) shedPartitions(now time.Time) {
	shed := false
	for _, p := range c.parts {
		if p.revoked || !p.full {
			continue
		}
		excess := p.held.len() - c.resumeHeld() + 1
		held := p.held.all()
		for i := len(held) - 1; i >= 0 && excess > 0; i-- {
			it := held[i]
			if !it.queued {
				continue // finished, started or waiting
			}
			ep := c.eps[it.EndpointID]
			if ep == nil || ep.fifo || !c.holdingShare(now, ep.acct) {
				continue
			}
			it.queued = false
			c.obs.Deferred(DeferFairShare)
			c.skip(it, DeferFairShare)
			excess--
			shed = true
		}
	}
	if !shed {
		return
	}
	for _, ep := range c.eps {
		c.filterQueue(ep, func(it *Item) bool { return it.queued })
	}
	c.tidy(now)
}

package dispatcher

import "time"

// minAccountShare is the least fair share of an account, however many
// accounts are active: enough for a few requests in parallel.
const minAccountShare = 4

// accountState is one account's hold on the process's request slots
// (Config.Concurrency). It exists while an endpoint state of the account
// exists or while the account lingers. Guarded by Dispatcher.mu.
type accountState struct {
	id       string
	inFlight int // requests in flight
	ready    int // its endpoints in the ready list
	// parked are its endpoints that could start a request but wait for the
	// account to be under its share again.
	parked   []*endpointState
	inParked bool // in Dispatcher.parkedAccts
	refs     int  // endpoint states pointing at it
	// busy: requests in flight, or endpoints ready or parked. An account
	// busy, or lingering (not busy for less than AccountLinger, since
	// idleAt), is active: counted in Dispatcher.active.
	busy, lingering bool
	idleAt          time.Time // wall clock
}

// attachAccountLocked returns the state of account id for a new endpoint
// state.
func (d *Dispatcher) attachAccountLocked(id string) *accountState {
	a := d.accts[id]
	if a == nil {
		a = &accountState{id: id}
		d.accts[id] = a
	}
	a.refs++
	return a
}

// detachAccountLocked is the end of an endpoint state of a.
func (d *Dispatcher) detachAccountLocked(a *accountState) {
	a.refs--
	d.dropAccountLocked(a)
}

// dropAccountLocked forgets a once nothing holds it and it counts for
// nothing.
func (d *Dispatcher) dropAccountLocked(a *accountState) {
	if a.refs == 0 && !a.busy && !a.lingering && d.accts[a.id] == a {
		delete(d.accts, a.id)
	}
}

// touchAccountLocked updates a's busy state and the count of active
// accounts after a change of its in-flight, ready or parked counts. An
// account that stops being busy lingers: it still counts, so the others'
// share stays put in the gaps between its records.
func (d *Dispatcher) touchAccountLocked(a *accountState) {
	busy := a.inFlight > 0 || a.ready > 0 || len(a.parked) > 0
	if busy == a.busy {
		return
	}
	a.busy = busy
	switch {
	case busy && a.lingering:
		a.lingering = false
	case busy:
		d.active++
	default:
		a.lingering, a.idleAt = true, time.Now()
	}
}

// shareLocked is how many requests one account may have in flight now:
// all of Concurrency when it is the only active account, else
// ceil(Concurrency/active), at least minAccountShare.
func (d *Dispatcher) shareLocked() int {
	if d.active <= 1 {
		return d.cfg.Concurrency
	}
	return max((d.cfg.Concurrency+d.active-1)/d.active, minAccountShare)
}

// parkLocked sets ep aside until its account is under its share.
func (d *Dispatcher) parkLocked(ep *endpointState) {
	a := ep.acct
	ep.parked = true
	a.parked = append(a.parked, ep)
	if !a.inParked {
		a.inParked = true
		d.parkedAccts = append(d.parkedAccts, a)
	}
	d.m.fairShareWaits.Inc()
}

// unparkLocked puts back in the ready list the parked endpoints of every
// account now under its share (others went idle, or its requests ended),
// and reports whether there were any. It runs only when slots are free and
// nothing else is ready, so the parked accounts are few (each holds at
// least a share) and the ready path stays O(1).
func (d *Dispatcher) unparkLocked() bool {
	share := d.shareLocked()
	moved := false
	keep := d.parkedAccts[:0]
	for _, a := range d.parkedAccts {
		if a.inFlight >= share {
			keep = append(keep, a)
			continue
		}
		d.releaseParkedLocked(a)
		moved = true
	}
	clear(d.parkedAccts[len(keep):])
	d.parkedAccts = keep
	return moved
}

// releaseParkedLocked moves a's parked endpoints to the ready list.
func (d *Dispatcher) releaseParkedLocked(a *accountState) {
	for _, ep := range a.parked {
		ep.parked = false
		d.markReadyLocked(ep)
	}
	clear(a.parked)
	a.parked = a.parked[:0]
	a.inParked = false
	d.touchAccountLocked(a)
}

// dropParkedLocked unparks the endpoints left with an empty queue (their
// records were dropped on revoke or shutdown).
func (d *Dispatcher) dropParkedLocked() {
	keep := d.parkedAccts[:0]
	for _, a := range d.parkedAccts {
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
		d.touchAccountLocked(a)
	}
	clear(d.parkedAccts[len(keep):])
	d.parkedAccts = keep
}

// sweepAccountsLocked ends the lingering of accounts idle for
// AccountLinger and forgets those nothing holds. When the count of active
// accounts drops, the others' share grows: the pump is run again.
func (d *Dispatcher) sweepAccountsLocked(now time.Time) {
	before := d.active
	for _, a := range d.accts {
		if a.lingering && now.Sub(a.idleAt) >= d.cfg.AccountLinger {
			a.lingering = false
			d.active--
		}
		d.dropAccountLocked(a)
	}
	d.m.activeAccounts.Set(float64(d.active))
	if d.active < before {
		d.pumpLocked()
	}
}

// crowdingLocked reports whether a record of account a must not be queued
// in partition ps: other accounts are active, the partition holds half of
// PartitionMaxHeld, and a already holds its share of slots. Queued, its
// records would fill the partition and pause its fetching, holding up the
// other accounts' records behind them for as long as a's own requests
// take; they go to the first retry tier instead, without spending an
// attempt, as past a full endpoint backlog.
func (d *Dispatcher) crowdingLocked(ps *partState, a *accountState) bool {
	return d.active > 1 && ps.pending.len() >= d.cfg.PartitionMaxHeld/2 && a.inFlight >= d.shareLocked()
}

// shedLocked empties the partitions full enough to be paused of the
// queued records of accounts at their share, newest first, to just below
// half of PartitionMaxHeld (where fetching resumes), deferring them to the first retry tier: a
// partition an account filled while it was alone (with no share to keep)
// flows again once other accounts are active. It runs with the periodic
// sweep, and walks only full partitions.
func (d *Dispatcher) shedLocked(now time.Time) {
	if d.active <= 1 {
		return
	}
	share := d.shareLocked()
	touched := map[*endpointState]bool{}
	for _, ps := range d.parts {
		if ps.revoked || ps.pending.len() < d.cfg.PartitionMaxHeld {
			continue
		}
		// Below half, where a full partition resumes fetching (doneLocked).
		excess := ps.pending.len() - d.resumeHeld() + 1
		held := ps.pending.all()
		for i := len(held) - 1; i >= 0 && excess > 0; i-- {
			it := held[i]
			if !it.queued { // finished or started
				continue
			}
			ep := d.eps[it.d.EndpointID]
			if ep == nil || ep.acct.inFlight < share {
				continue
			}
			it.queued = false
			touched[ep] = true
			d.m.fairShareDeferred.Inc()
			d.startFinishLocked(it, result{deferred: ClassFairShare, startedAt: now})
			excess--
		}
	}
	if len(touched) == 0 {
		return
	}
	for ep := range touched {
		q := ep.queue[:0]
		for _, it := range ep.queue {
			if it.queued {
				q = append(q, it)
			}
		}
		clear(ep.queue[len(q):])
		ep.queue = q
	}
	d.dropParkedLocked()
	for ep := range touched {
		d.forgetEndpointLocked(ep)
	}
}

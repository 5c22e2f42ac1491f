package sched

import "time"

// part is the state of one assigned partition.
type part struct {
	id Partition
	// held are the records read and not finished, in offset order: the
	// watermark is the first unfinished one.
	held heldQueue
	// waiting is the tail of held kept back behind a record not due yet
	// (its head): everything read after it waits behind it.
	waiting   []*Item
	lastSeen  int64 // offset of the last record admitted, -1 before any
	lastEpoch int32
	committed int64 // last committed offset, -1 before any commit
	running   int   // records handed out (Start or Skip) and not finished
	revoked   bool
	// The reasons fetching it is paused: full (it holds PartitionMaxHeld
	// records, until under half) and holding (its waiting head is not due).
	full, holding bool
	pausedNow     bool // the last Pause or Resume sent
	wake          *timer
}

func (p *part) paused() bool { return p.full || p.holding }

// watermark is the offset to commit: the first unfinished record, or the
// one after the last record read.
func (p *part) watermark() (Offset, bool) {
	if it := p.held.first(); it != nil {
		return Offset{Offset: it.Offset, Epoch: it.Epoch}, true
	}
	if p.lastSeen < 0 {
		return Offset{}, false
	}
	return Offset{Offset: p.lastSeen + 1, Epoch: p.lastEpoch}, true
}

// resumeHeld is the count of held records under which a full partition
// resumes: half of PartitionMaxHeld, at least 1 (half of 1 is 0).
func (c *Core) resumeHeld() int { return max(c.cfg.PartitionMaxHeld/2, 1) }

// setPaused sends Pause or Resume when p's reasons changed its state.
func (c *Core) setPaused(p *part) {
	if p.paused() == p.pausedNow {
		return
	}
	p.pausedNow = p.paused()
	k := Resume
	if p.pausedNow {
		k = Pause
	}
	c.out = append(c.out, Command{Kind: k, Part: p.id})
}

// admit holds one record read and routes it, unless a record not due
// holds its partition.
func (c *Core) admit(now time.Time, r Record) {
	p := c.parts[r.Part]
	if p == nil || p.revoked || c.stopping || r.Offset <= p.lastSeen {
		return // not ours any more, or read already
	}
	p.lastSeen, p.lastEpoch = r.Offset, r.Epoch
	it := &Item{Record: r, part: p}
	p.held.push(it)
	if r.Answered {
		// Done before this owner read it: nothing to send or produce, and
		// nothing behind it waits for it.
		it.Ref = nil
		p.held.finish(it)
		c.obs.Answered(p.id)
		return
	}
	if !p.full && p.held.len() >= c.cfg.PartitionMaxHeld {
		p.full = true
		c.setPaused(p)
	}
	if len(p.waiting) > 0 || !c.route(now, it) {
		p.waiting = append(p.waiting, it)
		c.hold(now, p)
	}
}

// hold pauses p until its waiting head is due.
func (c *Core) hold(now time.Time, p *part) {
	if !p.holding {
		p.holding = true
		c.setPaused(p)
	}
	c.timers.set(&p.wake, timer{at: p.waiting[0].DueAt, part: p})
}

// dueWoke routes p's waiting records that are due, in order, and holds
// again on the first that is not.
func (c *Core) dueWoke(now time.Time, p *part) {
	if p.revoked || c.stopping {
		return
	}
	w := p.waiting
	p.waiting = nil
	for i, it := range w {
		if !c.route(now, it) {
			p.waiting = w[i:]
			c.hold(now, p)
			return
		}
	}
	p.holding = false
	c.setPaused(p)
}

// dropWaiting drops p's waiting records unstarted and ends its hold.
func (c *Core) dropWaiting(p *part) {
	p.waiting = nil
	p.holding = false
	c.timers.stop(&p.wake)
}

// skip hands it out for a decision without a request.
func (c *Core) skip(it *Item, reason string) {
	it.started = true
	it.part.running++
	c.out = append(c.out, Command{Kind: Skip, Item: it, Reason: reason})
}

// heldQueue holds a partition's records from the first unfinished one on,
// in offset order: the watermark is its head. Records finish in any
// order; a finished record is marked, not removed, and the head moves past
// the finished records in front of it, so a completion costs O(1)
// amortised instead of a copy of the tail. The finished records behind an
// unfinished head are dropped by a compaction once they make up half of
// the slice, so its length stays within about twice the unfinished count.
type heldQueue struct {
	// items[head:] are the records from the first unfinished one on
	// (finished ones among them are marked); items[:head] are nil.
	items []*Item
	head  int
	held  int // unfinished records
}

// push appends it, the record after the last one pushed.
func (q *heldQueue) push(it *Item) {
	if n := len(q.items); n > 0 && n == cap(q.items) && n-q.held >= n/2 {
		q.compact() // frees at least half the slice: O(1) amortised
	}
	q.items = append(q.items, it)
	q.held++
}

// finish marks it finished; false if it already was. it must have been
// pushed.
func (q *heldQueue) finish(it *Item) bool {
	if it.finished {
		return false
	}
	it.finished = true
	q.held--
	if q.items[q.head] != it {
		return true // behind the head: the watermark does not move
	}
	for q.head < len(q.items) && q.items[q.head].finished {
		q.items[q.head] = nil
		q.head++
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return true
}

// compact drops the finished records and moves the rest to the front.
func (q *heldQueue) compact() {
	n := 0
	for _, it := range q.items[q.head:] {
		if !it.finished {
			q.items[n] = it
			n++
		}
	}
	clear(q.items[n:])
	q.items, q.head = q.items[:n], 0
}

// first returns the first unfinished record, or nil.
func (q *heldQueue) first() *Item {
	if q.head == len(q.items) {
		return nil
	}
	return q.items[q.head]
}

// len is the number of unfinished records.
func (q *heldQueue) len() int { return q.held }

// all returns the records from the first unfinished one on, in offset
// order, finished ones included (it.finished): callers skip those. The
// slice is valid until the next push or finish.
func (q *heldQueue) all() []*Item { return q.items[q.head:] }

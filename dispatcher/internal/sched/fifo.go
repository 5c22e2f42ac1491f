package sched

import "time"

// FIFO endpoints (Endpoint.FIFO): one record out at a time, in the order
// their records sit in their partition. The record out is the endpoint's
// head, from its Start to its Finished (or Release): the endpoint is not
// ready meanwhile, so its later records wait in its queue. A failed
// attempt comes back through Retry: the head stays, not running, with a
// timer at its due time, and is then put back first in the queue. Revoke
// and Stop drop a head waiting to be retried, unfinished: the watermark
// has not passed it, so the next owner starts from it.

// FIFO reports whether it is its FIFO endpoint's head: its failure is to
// be retried in place (Retry), not produced to a retry tier. Valid from
// its Start until the caller hands it back (RequestDone and then Retry,
// Release or Finished).
func (it *Item) FIFO() bool { return it.fifo != nil }

// Retry takes back it, the head of a FIFO endpoint whose request ended
// (RequestDone) and failed: it is started again, before the endpoint's
// later records, at or after at. it stays unfinished (the watermark does
// not pass it) and does not count as running while it waits. A record of
// a revoked partition, or one retried while stopping, is dropped
// unfinished instead.
func (c *Core) Retry(now time.Time, it *Item, at time.Time) []Command {
	ep := it.fifo
	it.part.running--
	if ep == nil || ep.head != it || it.part.revoked || c.stopping {
		c.releaseFIFO(now, it)
		return c.flush()
	}
	c.timers.set(&ep.retryWake, timer{at: at, retry: ep})
	return c.flush()
}

// Release lets it's FIFO endpoint start its next record before it is
// Finished: its outcome is final (delivered) and only its attempt record
// remains to be produced.
func (c *Core) Release(now time.Time, it *Item) []Command {
	c.releaseFIFO(now, it)
	return c.flush()
}

// releaseFIFO ends it's hold on its FIFO endpoint, if it has one.
func (c *Core) releaseFIFO(now time.Time, it *Item) {
	ep := it.fifo
	if ep == nil {
		return
	}
	it.fifo = nil
	if ep.head != it {
		return
	}
	ep.head = nil
	c.timers.stop(&ep.retryWake)
	c.markReady(now, ep)
	c.forgetEndpoint(now, ep)
	c.pump(now)
}

// retryWoke puts ep's head, due, back first in its queue.
func (c *Core) retryWoke(now time.Time, ep *endpoint) {
	it := ep.head
	if it == nil || c.eps[ep.id] != ep || c.stopping || it.part.revoked {
		return
	}
	ep.head, it.fifo = nil, nil
	it.started, it.queued = false, true
	ep.queue = append(ep.queue, nil)
	copy(ep.queue[1:], ep.queue)
	ep.queue[0] = it
	c.markReady(now, ep)
}

// dropRetries drops the heads of p waiting to be retried in place: they
// stay unfinished, for the next owner (or run) to read again.
func (c *Core) dropRetries(now time.Time, p *part) {
	for _, ep := range c.eps {
		it := ep.head
		if it == nil || it.part != p || ep.retryWake == nil {
			continue
		}
		c.timers.stop(&ep.retryWake)
		ep.head, it.fifo = nil, nil
		c.markReady(now, ep)
	}
}

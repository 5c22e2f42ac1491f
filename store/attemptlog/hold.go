package attemptlog

import (
	"cmp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store"
)

// heldDelivery is a delivery record the writer holds until its first
// attempt is read, so that its row is inserted once, in its final state.
// Only what the row and the offset commit need is kept, not the record
// (whose payload may be large).
type heldDelivery struct {
	pending   store.PendingDelivery
	partition int32
	offset    int64
	epoch     int32
	// since is when the writer first held it.
	since time.Time
	// released is set once its row is written.
	released bool
	// older is a record of the same delivery id read before it.
	older *heldDelivery
}

// attemptsClock is how far the writer has read the attempts topic, in
// the creation time of the events whose first attempts it has read: for
// every partition still behind its high watermark, the newest event
// creation time among the first attempts read from it; the oldest of
// those. Delivery records and their first attempts carry the same event
// creation time, so a delivery record whose event was created Hold before
// that clock, with no attempt read, has its attempt late (a slow endpoint,
// a paused one) or not coming, however far behind the writer and the
// dispatchers are. With every partition caught up there is no such clock
// and Hold is waited on the wall clock.
type attemptsClock struct {
	parts map[int32]*partitionClock
}

type partitionClock struct {
	created  time.Time // newest event creation time of a first attempt read
	caughtUp bool      // the last record read was the partition's last
	seen     time.Time // when the partition was last fetched from
}

// staleAfter forgets a lagging partition not fetched from for this long
// (revoked in a rebalance): it no longer holds the clock back.
const staleAfter = 5 * time.Second

func (c *attemptsClock) part(p int32) *partitionClock {
	if c.parts == nil {
		c.parts = map[int32]*partitionClock{}
	}
	pc := c.parts[p]
	if pc == nil {
		pc = &partitionClock{}
		c.parts[p] = pc
	}
	return pc
}

// fetched records how far a fetch of an attempts partition got.
func (c *attemptsClock) fetched(p kgo.FetchTopicPartition, now time.Time) {
	if len(p.Records) == 0 {
		return
	}
	pc := c.part(p.Partition)
	pc.caughtUp, pc.seen = p.Records[len(p.Records)-1].Offset+1 >= p.HighWatermark, now
}

// firstAttempt records the event creation time of a first attempt read.
func (c *attemptsClock) firstAttempt(partition int32, created time.Time) {
	if pc := c.part(partition); created.After(pc.created) {
		pc.created = created
	}
}

// at returns the clock, and false when no partition lags.
func (c *attemptsClock) at(now time.Time) (time.Time, bool) {
	var at time.Time
	lagging := false
	for p, pc := range c.parts {
		switch {
		case now.Sub(pc.seen) > staleAfter:
			delete(c.parts, p)
		case !pc.caughtUp && !pc.created.IsZero() && (!lagging || pc.created.Before(at)):
			// A partition that gave no first attempt yet (retries only)
			// says nothing of where the deliveries are.
			at, lagging = pc.created, true
		}
	}
	return at, lagging
}

// holdings are the delivery records held by Run's goroutine. Those of a
// partition revoked from the writer (or lost) are held on and written like
// the others, not dropped: the batch in hand when a partition is revoked
// may hold records of it polled before the revocation, and a partition
// assigned again is read again from the committed offset, so records
// dropped at a revocation could be followed by later ones of the same
// partition, and the commit would pass them. Held on, they keep every
// commit of their partition short of them until their rows are written (a
// record read twice, by two writers or by one, is written twice, which
// changes nothing: a pending row is inserted only where none exists).
//
// A batch costs in proportion to its own records, not to the records held
// (up to MaxHeld, 50,000; a pass over all of them per batch was 30% of the
// writer's CPU while it caught up): a record is found by its delivery id
// when its attempt is read, each partition's records are queued in offset
// order, which is also the order they were read in (so the front of a
// queue is its oldest on the wall clock and its committable offset) but
// after a partition is read again from an earlier offset (a rebalance, an
// offset reset), when the queue is sorted again, and released records
// leave their queue when they reach its front. Only the
// attempts clock, whose order is the events' and not the queues', needs a
// pass over all of them, at most every lagScanEvery.
type holdings struct {
	parts map[int32]*heldQueue
	// byID is the newest held record of each delivery id; older ones of
	// the same id (a record read twice) hang off it (heldDelivery.older)
	// and are released with it.
	byID map[string]*heldDelivery
	// count is the number of records held.
	count int
	// lagScanned is when the held records were last compared with the
	// attempts clock.
	lagScanned time.Time
	clock      attemptsClock
	// paused is whether the deliveries topic is paused (MaxHeld reached).
	paused bool
	// readTo is, per deliveries-topic partition, the offset after the last
	// record read: what is committed once nothing before it is held.
	readTo map[int32]kgo.EpochOffset
}

// heldQueue is one partition's held records in offset order; released
// ones stay until they reach the front, or until they are most of the
// queue (behind a record held long, up to MaxHold), when the queue is
// compacted: it keeps at most twice its records held (plus a few).
type heldQueue struct {
	q []*heldDelivery
	// held is how many records of q are not released.
	held int
	// unsorted is set when a record was queued behind a higher offset
	// (the partition read again from an earlier offset).
	unsorted bool
}

// front drops the released records at the front and returns the first
// record still held (the lowest offset held), or nil.
func (hq *heldQueue) front() *heldDelivery {
	if hq.unsorted {
		slices.SortStableFunc(hq.q, func(a, b *heldDelivery) int { return cmp.Compare(a.offset, b.offset) })
		hq.unsorted = false
	}
	i := 0
	for i < len(hq.q) && hq.q[i].released {
		i++
	}
	if i > 0 {
		clear(hq.q[:i])
		hq.q = hq.q[i:]
	}
	if len(hq.q) == 0 {
		hq.q = nil // let the backing array go
		return nil
	}
	return hq.q[0]
}

// lagScanEvery bounds how often the held records are compared with the
// attempts clock while the writer lags: a record is written pending at
// most this much after Hold has passed on that clock. A tenth of Hold,
// between 10ms and 500ms: a pass over 50,000 held records every 100ms was
// a tenth of the writer's CPU while it caught up (issue 15).
func lagScanEvery(cfg Config) time.Duration {
	return min(max(cfg.Hold/10, 10*time.Millisecond), 500*time.Millisecond)
}

// hold holds d, read from the deliveries topic.
func (h *holdings) hold(d *heldDelivery) {
	if h.parts == nil {
		h.parts, h.byID = map[int32]*heldQueue{}, map[string]*heldDelivery{}
	}
	hq := h.parts[d.partition]
	if hq == nil {
		hq = &heldQueue{}
		h.parts[d.partition] = hq
	}
	if n := len(hq.q); n >= 64 && n > 2*hq.held {
		kept := hq.q[:0]
		for _, k := range hq.q {
			if !k.released {
				kept = append(kept, k)
			}
		}
		clear(hq.q[len(kept):])
		hq.q = kept
	}
	if n := len(hq.q); n > 0 && d.offset < hq.q[n-1].offset {
		hq.unsorted = true
	}
	hq.q = append(hq.q, d)
	hq.held++
	d.older = h.byID[d.pending.ID]
	h.byID[d.pending.ID] = d
	h.count++
}

// releaseID moves every record held of delivery id to rows.
func (h *holdings) releaseID(id string, rows []store.PendingDelivery) []store.PendingDelivery {
	for d := h.byID[id]; d != nil; d = d.older {
		if !d.released {
			d.released = true
			h.count--
			h.parts[d.partition].held-- // its queue: a queue goes only once none of its records is held
			rows = append(rows, d.pending)
		}
	}
	delete(h.byID, id)
	return rows
}

// release returns the held records whose row is written now, with their
// attempt (attempted) or as pending; the others are held on. A record is
// written pending once the attempts read are of events created Hold after
// its event (while the writer lags), or once it has been held for Hold
// (while it keeps up), or for MaxHold in any case.
func (h *holdings) release(cfg Config, attempted map[string]bool, now time.Time) []store.PendingDelivery {
	var rows []store.PendingDelivery
	for id := range attempted {
		if h.byID[id] != nil {
			rows = h.releaseID(id, rows)
		}
	}
	clock, lagging := h.clock.at(now)
	wallHold := cfg.MaxHold
	if !lagging || cfg.Hold < 0 {
		wallHold = min(cfg.Hold, cfg.MaxHold)
	}
	// The front of each queue is its oldest on the wall clock (but after a
	// partition is read again: then its older records wait at most for
	// the ones before them).
	for _, hq := range h.parts {
		for d := hq.front(); d != nil && now.Sub(d.since) >= wallHold; d = hq.front() {
			rows = h.releaseID(d.pending.ID, rows)
		}
	}
	if lagging && now.Sub(h.lagScanned) >= lagScanEvery(cfg) {
		h.lagScanned = now
		for _, hq := range h.parts {
			for _, d := range hq.q {
				if !d.released && clock.Sub(d.pending.EventCreated) >= cfg.Hold {
					rows = h.releaseID(d.pending.ID, rows)
				}
			}
		}
	}
	return rows
}

// pace pauses the deliveries topic while MaxHeld records are held (the
// attempts topic is behind: its records are what releases them) and
// resumes it once half of them are released (all of them at MaxHeld 1,
// whose half is 0 in integers: the topic was never resumed).
func (h *holdings) pace(cl *kgo.Client, cfg Config) {
	switch {
	case !h.paused && h.count >= cfg.MaxHeld:
		cl.PauseFetchTopics(cfg.DeliveriesTopic)
		h.paused = true
	case h.paused && h.count < max(cfg.MaxHeld/2, 1):
		cl.ResumeFetchTopics(cfg.DeliveriesTopic)
		h.paused = false
	}
}

// read records that a deliveries-topic record was read.
func (h *holdings) read(r *kgo.Record) {
	if h.readTo == nil {
		h.readTo = map[int32]kgo.EpochOffset{}
	}
	if cur, ok := h.readTo[r.Partition]; !ok || r.Offset+1 > cur.Offset {
		h.readTo[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	}
}

// commitable is, per deliveries-topic partition read, the offset to
// commit: past the last record read, but not past the first one held.
func (h *holdings) commitable() map[int32]kgo.EpochOffset {
	out := make(map[int32]kgo.EpochOffset, len(h.readTo))
	for p, o := range h.readTo {
		out[p] = o
	}
	for p, hq := range h.parts {
		d := hq.front()
		if d == nil {
			delete(h.parts, p)
			continue
		}
		if cur, ok := out[p]; !ok || d.offset < cur.Offset {
			out[p] = kgo.EpochOffset{Epoch: d.epoch, Offset: d.offset}
		}
	}
	return out
}

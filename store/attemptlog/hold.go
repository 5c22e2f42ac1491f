package attemptlog

import (
	"sync"
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

// holdings are the delivery records held by Run's goroutine, and the
// deliveries-topic partitions revoked from the writer meanwhile (recorded
// by kgo's callbacks), whose held records are dropped: the partition's new
// owner reads them again from the committed offset, which stops short of
// them.
type holdings struct {
	held  []heldDelivery
	clock attemptsClock
	// paused is whether the deliveries topic is paused (MaxHeld reached).
	paused bool
	// readTo is, per deliveries-topic partition, the offset after the last
	// record read: what is committed once nothing before it is held.
	readTo map[int32]kgo.EpochOffset

	mu      sync.Mutex
	revoked map[int32]bool
}

func (h *holdings) revoke(topic string, parts map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range parts[topic] {
		if h.revoked == nil {
			h.revoked = map[int32]bool{}
		}
		h.revoked[p] = true
	}
}

// dropRevoked drops the held records of revoked partitions.
func (h *holdings) dropRevoked() {
	h.mu.Lock()
	revoked := h.revoked
	h.revoked = nil
	h.mu.Unlock()
	if len(revoked) == 0 {
		return
	}
	for p := range revoked {
		delete(h.readTo, p)
	}
	kept := h.held[:0]
	for _, d := range h.held {
		if !revoked[d.partition] {
			kept = append(kept, d)
		}
	}
	clear(h.held[len(kept):])
	h.held = kept
}

// release splits the held records into those whose row is written now,
// with their attempt (attempted) or as pending, and those held on. A
// record is written pending once the attempts read are of events created
// Hold after its event (while the writer lags), or once it has been held
// for Hold (while it keeps up), or for MaxHold in any case.
func (h *holdings) release(cfg Config, attempted map[string]bool, now time.Time) []store.PendingDelivery {
	clock, lagging := h.clock.at(now)
	var rows []store.PendingDelivery
	kept := h.held[:0]
	for _, d := range h.held {
		held := now.Sub(d.since)
		late := held >= cfg.Hold
		if lagging {
			late = clock.Sub(d.pending.EventCreated) >= cfg.Hold
		}
		if attempted[d.pending.ID] || late || held >= cfg.MaxHold {
			rows = append(rows, d.pending)
			continue
		}
		kept = append(kept, d)
	}
	clear(h.held[len(kept):])
	h.held = kept
	return rows
}

// pace pauses the deliveries topic while MaxHeld records are held (the
// attempts topic is behind: its records are what releases them) and
// resumes it once half of them are released.
func (h *holdings) pace(cl *kgo.Client, cfg Config) {
	switch {
	case !h.paused && len(h.held) >= cfg.MaxHeld:
		cl.PauseFetchTopics(cfg.DeliveriesTopic)
		h.paused = true
	case h.paused && len(h.held) < cfg.MaxHeld/2:
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
	for _, d := range h.held {
		if cur, ok := out[d.partition]; !ok || d.offset < cur.Offset {
			out[d.partition] = kgo.EpochOffset{Epoch: d.epoch, Offset: d.offset}
		}
	}
	return out
}

package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// defaultChunk is how many replayed records a run produces before it waits
// for their acknowledgement and saves its progress.
const defaultChunk = 1000

// chunk is what a run handled since its last save: the replayed records
// not acknowledged yet, and the counters and DLQ positions that apply once
// they are. Nothing of a chunk reaches the run's row before the broker
// acknowledged its records, so a crash replays it again rather than
// skipping it (and recovery finds what was produced).
type chunk struct {
	r       *runner
	cl      *kgo.Client
	size    int
	pending []*kgo.Record
	// sends are the deliveries of pending, recorded once acknowledged.
	sends []store.ReplaySend
	// next is, per DLQ partition, the offset after the last record handled.
	next map[int32]int64
	// scanned, matched and skipped count the dead letters handled,
	// unreplay the skipped ones that are not deliveries; before those found
	// produced by an interrupted run.
	scanned, matched, skipped, unreplay, before int64
	skips                                       map[string]int64
}

// newChunk sizes the run's chunks: 1000 records, fewer at a low rate so
// that progress is saved about every second.
func (r *runner) newChunk(cl *kgo.Client) *chunk {
	size := defaultChunk
	if r.req.Rate > 0 {
		size = min(max(int(r.req.Rate), 1), size)
	}
	if r.req.chunk > 0 {
		size = r.req.chunk
	}
	return &chunk{r: r, cl: cl, size: size, pending: make([]*kgo.Record, 0, size),
		next: map[int32]int64{}, skips: map[string]int64{}}
}

// limitReached reports whether the request's Limit is used up, counting
// what this chunk holds.
func (c *chunk) limitReached() bool {
	limit := c.r.req.Limit
	return limit > 0 && c.r.row.Replayed+c.before+int64(len(c.pending)) >= limit
}

// add queues a replayed record of d and flushes the chunk when it is full.
func (c *chunk) add(ctx context.Context, rec *kgo.Record, d *delivery.Delivery) error {
	c.pending = append(c.pending, rec)
	c.sends = append(c.sends, store.ReplaySend{Account: d.Account, DeliveryID: d.ID, EndpointID: d.EndpointID})
	if len(c.pending) < c.size {
		return nil
	}
	return c.flush(ctx)
}

// flush produces the pending records and waits for their acknowledgement,
// then applies the chunk to the run and saves its progress.
func (c *chunk) flush(ctx context.Context) error {
	if err := c.produce(ctx); err != nil {
		return err
	}
	// Before the progress: after a crash in between, the next run finds
	// the records produced (recover) and records them again.
	if err := c.r.deps.Store.RecordReplaySends(ctx, c.r.row.Account, c.r.row.ID, c.sends); err != nil {
		return err
	}
	c.sends = c.sends[:0]
	c.apply()
	return c.r.save(ctx, "")
}

func (c *chunk) produce(ctx context.Context) error {
	if len(c.pending) == 0 {
		return nil
	}
	// kgo retries a produce until the broker acknowledges it: one that
	// takes long is an outage, reported as one.
	stalled := time.AfterFunc(produceStall, func() {
		c.r.outage.begin(ctx, fmt.Errorf("producing replayed deliveries: not acknowledged within %s", produceStall))
	})
	err := c.cl.ProduceSync(ctx, c.pending...).FirstErr()
	stalled.Stop()
	if err != nil {
		return fmt.Errorf("producing replayed deliveries: %w", kafkaErr(err))
	}
	c.r.outage.end(ctx)
	if c.r.req.afterProduce != nil {
		return c.r.req.afterProduce()
	}
	return nil
}

// apply moves an acknowledged chunk into the run's row and progress, and
// empties it.
func (c *chunk) apply() {
	r := c.r
	if len(c.pending) > 0 {
		if r.pendingRecovered == 0 {
			// Every record below the markers is saved as handled: the
			// next run needs to read back only what follows.
			for _, rec := range c.pending {
				if m, ok := r.prog.Markers[rec.Partition]; !ok || rec.Offset+1 > m {
					r.prog.Markers[rec.Partition] = rec.Offset + 1
				}
			}
		}
		r.row.Replayed += int64(len(c.pending))
		c.pending = c.pending[:0]
	}
	r.prog.Scanned += c.scanned
	r.row.Matched += c.matched
	r.row.Skipped += c.skipped
	r.row.Replayed += c.before
	r.unreplay += c.unreplay
	c.scanned, c.matched, c.skipped, c.unreplay, c.before = 0, 0, 0, 0, 0
	for reason, n := range c.skips {
		if r.prog.Skips == nil {
			r.prog.Skips = map[string]int64{}
		}
		r.prog.Skips[reason] += n
		delete(c.skips, reason)
	}
	for p, o := range c.next {
		r.prog.Next[p] = o
		delete(c.next, p)
	}
}

package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkaconn"
)

// record is a record read, as the dispatcher's goroutines see it: the
// Kafka record and its decoding (nil when malformed). The core carries it
// opaque, in sched.Item.Ref.
type record struct {
	rec *kgo.Record
	d   *delivery.Delivery
	// started: a request was started for it (counted in d.inflight until
	// its completion).
	started bool
}

// recordOf is the record an item of the core carries.
func recordOf(it *sched.Item) *record { return it.Ref.(*record) }

// poll reads records until ctx ends (nil) or pollCtx ends with a
// permanent error (that error). Records are decoded here, on the poll
// loop's goroutine, marked when answered already (resume.go: the first
// fetch of a partition after its assignment waits for a read-back of the
// attempts topic), and admitted into the core by the loop; rebalancing
// is allowed again only after, so no record of a revoked partition is
// admitted after its revoke.
func (d *Dispatcher) poll(ctx, pollCtx context.Context) error {
	var recs []sched.Record
	for {
		fs := d.cl.PollRecords(pollCtx, d.cfg.MaxPollRecords)
		if pollCtx.Err() != nil || fs.IsClientClosed() {
			d.cl.AllowRebalance()
			if err := context.Cause(pollCtx); ctx.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		d.fetchErrors(ctx, fs)
		recs = recs[:0]
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, d.decode(r)) })
		if len(recs) > 0 {
			d.resume(pollCtx, recs)
			d.do(func() { d.apply(d.core.Admit(d.clock.Now(), recs)) })
			clear(recs) // the core keeps copies; drop the references
		}
		d.cl.AllowRebalance()
	}
}

// fetchErrors reports the errors of a fetch: a permanent one ends Run.
func (d *Dispatcher) fetchErrors(ctx context.Context, fs kgo.Fetches) {
	var failed error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		if kafkaconn.Permanent(err) {
			d.fatal(fmt.Errorf("fetching %s[%d]: %w", t, p, err))
		}
		failed = fmt.Errorf("%s[%d]: %w", t, p, err)
	})
	if failed != nil {
		d.fetchOutage.fail(ctx, d.log, failed)
	} else if !fs.Empty() {
		d.fetchOutage.ok(ctx, d.log)
	}
}

// decode is admission's view of r: where it goes and when it is due. A
// record that is not a delivery is admitted as malformed and
// dead-lettered in its turn.
func (d *Dispatcher) decode(r *kgo.Record) sched.Record {
	sr := sched.Record{Part: sched.Partition{Topic: r.Topic, Partition: r.Partition},
		Offset: r.Offset, Epoch: r.LeaderEpoch}
	dl, err := delivery.Decode(r)
	if err != nil {
		d.m.malformed.Inc()
		d.log.Warn("malformed delivery record, dead-lettering", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "error", err)
		sr.Malformed, sr.Ref = true, &record{rec: r}
		return sr
	}
	sr.EndpointID, sr.Account, sr.DueAt = dl.EndpointID, dl.Account, dl.DueAt
	sr.Ref = &record{rec: r, d: dl}
	return sr
}

package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// idlePoll is how long a read waits for records before checking whether
// the partitions it still expects records from were truncated meanwhile.
const idlePoll = 5 * time.Second

// readRanges reads the offsets ranges of topic with a client of its own
// and calls fn with each polled batch (records of a partition in offset
// order), until every range is read, fn returns an error (errStop ends the
// read without one) or ctx ends. It holds at most one fetch in memory.
func readRanges(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func([]*kgo.Record) error) error {
	cl, to, err := rangeClient(opts, topic, ranges)
	if cl == nil {
		return err
	}
	defer cl.Close()
	batch := make([]*kgo.Record, 0, 1024)
	for len(to) > 0 {
		fs, err := poll(ctx, cl)
		if err != nil {
			return err
		}
		batch = batch[:0]
		var finished []int32
		fs.EachRecord(func(r *kgo.Record) {
			ok, last := take(to, r)
			if ok && !r.Attrs.IsControl() {
				batch = append(batch, r)
			}
			if last {
				finished = append(finished, r.Partition)
			}
		})
		if len(finished) > 0 {
			cl.PauseFetchPartitions(map[string][]int32{topic: finished})
		}
		if len(batch) > 0 {
			if err := fn(batch); err != nil {
				if errors.Is(err, errStop) {
					return nil
				}
				return err
			}
			continue
		}
		// Nothing came: records below an end offset may have been deleted
		// by retention since the snapshot.
		if err := dropTruncated(ctx, cl, topic, to); err != nil {
			return err
		}
	}
	return nil
}

// rangeClient makes a client consuming the non-empty ranges, and returns
// with it what is left to read of each (take); no client (and a nil error)
// when there is nothing to read.
func rangeClient(opts []kgo.Opt, topic string, ranges map[int32]Range) (*kgo.Client, map[int32]Range, error) {
	start := map[int32]kgo.Offset{}
	to := map[int32]Range{}
	for p, r := range ranges {
		if r.From < r.To {
			start[p] = kgo.NewOffset().At(r.From)
			to[p] = r
		}
	}
	if len(start) == 0 {
		return nil, nil, nil
	}
	cl, err := kgo.NewClient(append(slices.Clip(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		// The router writes dead letters in transactions: read what
		// committed, and see the transaction markers, which may hold a
		// range's last offsets (take).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(2<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.MaxConcurrentFetches(1),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, to, nil
}

// take reports whether r is the next record to read of its partition's
// range in left, and moves the range past it; last when that ends the
// range (which is then removed). A record below the range's position is
// not taken: after OFFSET_OUT_OF_RANGE kgo resets a partition to its log
// start, and fetches again records that were read (and handled) already.
//
// A record at or past the range's end also ends it (not taken): offsets
// ascend, so nothing below the end is left to come, as when the range's
// last offsets were an aborted transaction's records.
func take(left map[int32]Range, r *kgo.Record) (ok, last bool) {
	rg, reading := left[r.Partition]
	if !reading || r.Offset < rg.From {
		return false, false
	}
	if r.Offset >= rg.To {
		delete(left, r.Partition)
		return false, true
	}
	rg.From = r.Offset + 1
	if rg.From >= rg.To {
		delete(left, r.Partition)
		return true, true
	}
	left[r.Partition] = rg
	return true, false
}

// poll polls once, for at most idlePoll, and returns the first fetch
// error other than the poll's own timeout.
func poll(ctx context.Context, cl *kgo.Client) (kgo.Fetches, error) {
	pollCtx, cancel := context.WithTimeout(ctx, idlePoll)
	fs := cl.PollRecords(pollCtx, 2000)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var fetchErr error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && fetchErr == nil {
			fetchErr = fmt.Errorf("reading %s partition %d: %w", t, p, fetchError(err))
		}
	})
	return fs, fetchErr
}

// fetchError marks a fetch error kgo hands over: a broker's error code is
// waited out unless it is permanent (kafkaErr), while a batch kgo cannot
// decode (a bad CRC, an unknown compression) is not, as waiting would
// fetch it again and again.
func fetchError(err error) error {
	if _, ok := errors.AsType[*kerr.Error](err); ok {
		return kafkaErr(err)
	}
	return err
}

// dropTruncated forgets the ranges whose records all fell out of retention.
func dropTruncated(ctx context.Context, cl *kgo.Client, topic string, to map[int32]Range) error {
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing start offsets of %s: %w", topic, kafkaErr(err))
	}
	starts.Each(func(o kadm.ListedOffset) {
		if rg, ok := to[o.Partition]; ok && o.Err == nil && o.Offset >= rg.To {
			delete(to, o.Partition)
		}
	})
	return nil
}

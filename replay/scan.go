package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ScanStats says what a scan read.
type ScanStats struct {
	// Scanned counts the dead letters read, Matched those passing the filter.
	Scanned int64 `json:"scanned"`
	Matched int64 `json:"matched"`
}

// Scan streams the dead letters matching f to fn, partition by partition in
// offset order within each, until the end offsets listed when it started.
// fn returning an error stops the scan with it.
func Scan(ctx context.Context, deps Deps, f Filter, fn func(Entry) error) (ScanStats, error) {
	var st ScanStats
	if err := f.Validate(); err != nil {
		return st, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	adm, err := kgo.NewClient(deps.KafkaOpts...)
	if err != nil {
		return st, fmt.Errorf("kafka client: %w", err)
	}
	defer adm.Close()
	ranges, err := bounds(ctx, kadm.NewClient(adm), deps.Names.DLQ, f)
	if err != nil {
		return st, err
	}
	err = readRanges(ctx, deps.KafkaOpts, deps.Names.DLQ, ranges, func(recs []*kgo.Record) error {
		for _, r := range recs {
			st.Scanned++
			e := decode(r)
			if !f.Match(&e) {
				continue
			}
			st.Matched++
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
	return st, err
}

// Range is the offsets [From, To) of one partition.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// untilSlack widens the offset bound of Filter.Until: record timestamps are
// set by producers and need not grow strictly with offsets, so records up
// to this much later are read, and filtered one by one.
const untilSlack = 5 * time.Minute

// partitionOf is the partition the default Kafka partitioner (murmur2 of
// the key, as the router uses) gives key among n.
func partitionOf(key string, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, n))
}

// bounds snapshots the offsets of topic that can hold dead letters
// matching f: every partition, or only the endpoint's one when f names an
// endpoint; from the first record at or after f.Since (ListOffsetsAfterMilli)
// to the end offset, or to the first record past f.Until plus a slack.
func bounds(ctx context.Context, adm *kadm.Client, topic string, f Filter) (map[int32]Range, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing start offsets of %s: %w", topic, err)
	}
	out := map[int32]Range{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = Range{To: o.Offset} })
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s does not exist (has hookd started?)", topic)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if r, ok := out[o.Partition]; ok && o.Err == nil {
			r.From = o.Offset
			out[o.Partition] = r
		}
	})
	if f.EndpointID != "" {
		p := partitionOf(f.EndpointID, len(out))
		out = map[int32]Range{p: out[p]}
	}
	if !f.Since.IsZero() {
		after, err := adm.ListOffsetsAfterMilli(ctx, f.Since.UnixMilli(), topic)
		if err != nil {
			return nil, fmt.Errorf("listing offsets of %s after %s: %w", topic, f.Since.Format(time.RFC3339), err)
		}
		after.Each(func(o kadm.ListedOffset) {
			if r, ok := out[o.Partition]; ok && o.Err == nil && o.Offset >= 0 {
				r.From = max(r.From, o.Offset)
				out[o.Partition] = r
			}
		})
	}
	if !f.Until.IsZero() {
		after, err := adm.ListOffsetsAfterMilli(ctx, f.Until.Add(untilSlack).UnixMilli(), topic)
		if err != nil {
			return nil, fmt.Errorf("listing offsets of %s after %s: %w", topic, f.Until.Format(time.RFC3339), err)
		}
		after.Each(func(o kadm.ListedOffset) {
			if r, ok := out[o.Partition]; ok && o.Err == nil && o.Offset >= 0 {
				r.To = min(r.To, o.Offset)
				out[o.Partition] = r
			}
		})
	}
	for p, r := range out {
		if r.From >= r.To {
			delete(out, p)
		}
	}
	return out, nil
}

// idlePoll is how long a read waits for records before checking whether
// the partitions it still expects records from were truncated meanwhile.
const idlePoll = 5 * time.Second

// readRanges reads the offsets ranges of topic with a client of its own
// and calls fn with each polled batch (records of a partition in offset
// order), until every range is read, fn returns an error (errStop ends the
// read without one) or ctx ends. It holds at most one fetch in memory.
func readRanges(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func([]*kgo.Record) error) error {
	start := map[int32]kgo.Offset{}
	to := map[int32]int64{}
	for p, r := range ranges {
		if r.From < r.To {
			start[p] = kgo.NewOffset().At(r.From)
			to[p] = r.To
		}
	}
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clip(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchMaxBytes(2<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
		kgo.MaxConcurrentFetches(1),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	batch := make([]*kgo.Record, 0, 1024)
	for len(to) > 0 {
		pollCtx, cancel := context.WithTimeout(ctx, idlePoll)
		fs := cl.PollRecords(pollCtx, 2000)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && fetchErr == nil {
				fetchErr = fmt.Errorf("reading %s partition %d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		batch = batch[:0]
		var finished []int32
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := to[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			batch = append(batch, r)
			if r.Offset+1 >= end {
				delete(to, r.Partition)
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

// dropTruncated forgets the ranges whose records all fell out of retention.
func dropTruncated(ctx context.Context, cl *kgo.Client, topic string, to map[int32]int64) error {
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing start offsets of %s: %w", topic, err)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := to[o.Partition]; ok && o.Err == nil && o.Offset >= end {
			delete(to, o.Partition)
		}
	})
	return nil
}

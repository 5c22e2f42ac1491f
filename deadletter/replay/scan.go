package replay

import (
	"context"
	"fmt"
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

// Scan streams the dead letters matching f to fn in fetch order: each
// partition in offset order, partitions interleaved as fetched, until the
// end offsets listed when it started. fn returning an error stops the scan
// with it.
func Scan(ctx context.Context, deps Deps, f Filter, fn func(Entry) error) (ScanStats, error) {
	return scan(ctx, deps, f, readRanges, fn)
}

// ScanByTime is Scan in dead-letter time order, oldest first: partitions
// are merged by record timestamp (the time of dead-lettering; ties by
// partition, then offset), each partition still in offset order. It reads
// partitions in step and holds at most one fetch per partition, so a
// caller that stops after n entries has read little more than n.
func ScanByTime(ctx context.Context, deps Deps, f Filter, fn func(Entry) error) (ScanStats, error) {
	return scan(ctx, deps, f, readMerged, fn)
}

// reader reads offset ranges of a topic, calling fn with batches of
// records (readRanges, readMerged).
type reader func(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func([]*kgo.Record) error) error

func scan(ctx context.Context, deps Deps, f Filter, read reader, fn func(Entry) error) (ScanStats, error) {
	var st ScanStats
	err := scanRanges(ctx, deps, f, read, func(recs []*kgo.Record) error {
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

// scanRanges snapshots the DLQ ranges that can hold dead letters matching
// f and reads them with read.
func scanRanges(ctx context.Context, deps Deps, f Filter, read reader, fn func([]*kgo.Record) error) error {
	ranges, err := dlqRanges(ctx, deps, f)
	if err != nil {
		return err
	}
	return read(ctx, deps.KafkaOpts, deps.Names.DLQ, ranges, fn)
}

// dlqRanges validates f and snapshots the DLQ offset ranges that can hold
// its dead letters (bounds).
func dlqRanges(ctx context.Context, deps Deps, f Filter) (map[int32]Range, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	adm, err := kgo.NewClient(deps.KafkaOpts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer adm.Close()
	return bounds(ctx, kadm.NewClient(adm), deps.Names.DLQ, f)
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
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, kafkaErr(err))
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing start offsets of %s: %w", topic, kafkaErr(err))
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
			return nil, fmt.Errorf("listing offsets of %s after %s: %w", topic, f.Since.Format(time.RFC3339), kafkaErr(err))
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
			return nil, fmt.Errorf("listing offsets of %s after %s: %w", topic, f.Until.Format(time.RFC3339), kafkaErr(err))
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

package replay

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// readMerged reads the offset ranges of topic like readRanges, but hands
// fn the records of all partitions merged by timestamp (ties by partition,
// then offset). A record is handed over only once every partition still
// being read has a record buffered, so that no older one can follow (given
// that each partition's timestamps ascend, as the dispatchers stamp dead
// letters when they write them). A partition with records buffered is
// paused, so at most one fetch per partition is held.
func readMerged(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func([]*kgo.Record) error) error {
	cl, to, err := rangeClient(opts, topic, ranges)
	if cl == nil {
		return err
	}
	defer cl.Close()
	m := merger{to: to, bufs: map[int32][]*kgo.Record{}}
	for p := range to {
		m.parts = append(m.parts, p)
	}
	for {
		if out := m.pop(); len(out) > 0 {
			if err := fn(out); err != nil {
				if errors.Is(err, errStop) {
					return nil
				}
				return err
			}
		}
		if len(m.to) == 0 && len(m.bufs) == 0 {
			return nil
		}
		pause, resume := m.fetchable()
		cl.PauseFetchPartitions(map[string][]int32{topic: pause})
		cl.ResumeFetchPartitions(map[string][]int32{topic: resume})
		fs, err := poll(ctx, cl)
		if err != nil {
			return err
		}
		got := false
		fs.EachRecord(func(r *kgo.Record) { got = m.add(r) || got })
		if !got {
			// Records below an end offset may have been deleted by
			// retention since the snapshot.
			if err := dropTruncated(ctx, cl, topic, m.to); err != nil {
				return err
			}
		}
	}
}

// merger buffers the records of each partition until they can be handed
// over in timestamp order.
type merger struct {
	// parts are the partitions read.
	parts []int32
	// to is, per partition still being read, what is left of its range.
	to map[int32]Range
	// bufs holds each partition's records read and not handed over yet;
	// a partition without any has no key.
	bufs map[int32][]*kgo.Record
}

// add buffers a polled record of the ranges; false for one outside them.
// A transaction marker moves its range on but is not buffered.
func (m *merger) add(r *kgo.Record) bool {
	if ok, _ := take(m.to, r); !ok || r.Attrs.IsControl() {
		return ok
	}
	m.bufs[r.Partition] = append(m.bufs[r.Partition], r)
	return true
}

// pop takes, oldest first, the buffered records that can be handed over:
// while every partition still being read has one buffered.
func (m *merger) pop() []*kgo.Record {
	var out []*kgo.Record
	for {
		for p := range m.to {
			if len(m.bufs[p]) == 0 {
				return out
			}
		}
		var best *kgo.Record
		for _, buf := range m.bufs {
			if best == nil || before(buf[0], best) {
				best = buf[0]
			}
		}
		if best == nil {
			return out
		}
		out = append(out, best)
		if rest := m.bufs[best.Partition][1:]; len(rest) > 0 {
			m.bufs[best.Partition] = rest
		} else {
			delete(m.bufs, best.Partition)
		}
	}
}

// fetchable says which partitions to fetch next: those still being read
// with nothing buffered; every other one is paused.
func (m *merger) fetchable() (pause, resume []int32) {
	for _, p := range m.parts {
		_, reading := m.to[p]
		if _, buffered := m.bufs[p]; reading && !buffered {
			resume = append(resume, p)
		} else {
			pause = append(pause, p)
		}
	}
	return pause, resume
}

// before orders records by timestamp, then partition, then offset.
func before(a, b *kgo.Record) bool {
	if !a.Timestamp.Equal(b.Timestamp) {
		return a.Timestamp.Before(b.Timestamp)
	}
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Offset < b.Offset
}

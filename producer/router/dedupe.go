package router

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// dedupe remembers, per events-topic partition, the events (account and
// id) fanned out within the window, so that a repeat is dropped. Its state
// is kept the way Kafka Streams keeps a state store: each new key is
// written to the compacted changelog topic, to the partition of the same
// number, in the transaction that fans the event out, and a partition's
// state is read back from the changelog the first time the router handles
// a record of it after being assigned it. A rolled-back batch leaves no
// trace in the changelog (its readers are read_committed) nor in memory
// (a batch's keys are applied only once its transaction commits).
//
// Time is the events' record timestamps (stream time), not the clock: a
// backlog read late is judged as it was produced, and reading the same
// input again gives the same decisions.
type dedupe struct {
	topic   string
	window  time.Duration
	maxKeys int
	// opts are the router's client options, for the clients that read the
	// changelog back.
	opts []kgo.Opt
	hash hasher

	mu    sync.Mutex // parts is dropped from kgo's rebalance callbacks
	parts map[int32]*seen
}

// key is an event's identity in the dedupe state: 128 bits of two
// independently seeded maphash hashes of its changelog key (account and
// id). The state holds up to DedupeMaxKeys per partition (300,000 keys on
// six partitions by default) and is looked up and updated for every event:
// fixed-size keys and millisecond times (the record timestamps' own unit)
// keep its maps free of pointers, so the garbage collector does not scan
// them and a lookup compares 16 bytes in place instead of following a
// string (saturation pprof before:
// the dedupe maps 25% of the router's CPU, plus most of its GC marking).
// Two distinct events of a partition collide with a chance of about
// DedupeMaxKeys / 2^128 per event, far below a silent memory error; the
// seeds are random per process, so colliding keys cannot be crafted, and
// the changelog keeps the keys themselves.
type key [2]uint64

// hasher makes the keys of one router.
type hasher struct{ a, b maphash.Seed }

func newHasher() hasher { return hasher{maphash.MakeSeed(), maphash.MakeSeed()} }

func (h hasher) key(s string) key { return key{maphash.String(h.a, s), maphash.String(h.b, s)} }

// seen is one partition's keys: first-seen timestamp (Unix milliseconds) by
// key, and the keys in the order they were added, for eviction.
type seen struct {
	at    map[key]int64
	order []seenKey
	head  int
	// now is the partition's stream time: the latest timestamp seen.
	now int64
}

type seenKey struct {
	k  key
	at int64
}

func newSeen() *seen { return &seen{at: map[key]int64{}, now: math.MinInt64} }

// dup reports whether k, first seen at its event's timestamp ts, repeats
// a key seen within the window.
func (s *seen) dup(k key, ts int64, window time.Duration) bool {
	first, ok := s.at[k]
	return ok && elapsed(first, ts) <= window.Milliseconds()
}

// elapsed is to - from in milliseconds, saturated instead of wrapping:
// a producer may set any timestamp.
func elapsed(from, to int64) int64 {
	d := to - from
	switch {
	case to >= from && d < 0:
		return math.MaxInt64
	case to < from && d > 0:
		return math.MinInt64
	}
	return d
}

// add records k at ts and evicts what fell out of the window or beyond
// maxKeys, oldest first.
func (s *seen) add(k key, ts int64, window time.Duration, maxKeys int) {
	s.at[k] = ts
	s.order = append(s.order, seenKey{k, ts})
	s.now = max(s.now, ts)
	for s.head < len(s.order) {
		o := s.order[s.head]
		if len(s.at) <= maxKeys && elapsed(o.at, s.now) <= window.Milliseconds() {
			break
		}
		if at, ok := s.at[o.k]; ok && at == o.at { // not re-added since
			delete(s.at, o.k)
		}
		s.head++
	}
	if s.head > len(s.order)/2 && s.head > 1024 {
		s.order = append(s.order[:0], s.order[s.head:]...)
		s.head = 0
	}
}

// dedupeKey is the changelog key of an event: its account and id, which
// cannot contain a space (event.Parse).
func dedupeKey(account, id string) string { return account + " " + id }

// pending are the keys of the batch being fanned out, applied to the
// partitions' state once its transaction commits.
type pending struct {
	keys  map[int32]map[key]int64
	order []pendingKey
}

type pendingKey struct {
	part int32
	k    key
	at   int64
}

func (p *pending) reset() {
	clear(p.keys)
	p.order = p.order[:0]
}

// check reports whether the event with changelog key name, read from part
// at ts, repeats one fanned out within the window (committed or earlier
// in this batch); if not, it is added to the batch's keys and the caller
// writes its changelog record.
func (d *dedupe) check(p *pending, s *seen, part int32, name string, ts time.Time) bool {
	k, at := d.hash.key(name), ts.UnixMilli()
	if s.dup(k, at, d.window) {
		return true
	}
	if first, ok := p.keys[part][k]; ok && elapsed(first, at) <= d.window.Milliseconds() {
		return true
	}
	if p.keys == nil {
		p.keys = map[int32]map[key]int64{}
	}
	if p.keys[part] == nil {
		p.keys[part] = map[key]int64{}
	}
	p.keys[part][k] = at
	p.order = append(p.order, pendingKey{part, k, at})
	return false
}

// commit applies the keys of a committed batch to the partitions' state.
func (d *dedupe) commit(p *pending) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range p.order {
		if s := d.parts[k.part]; s != nil { // nil: revoked meanwhile
			s.add(k.k, k.at, d.window, d.maxKeys)
		}
	}
}

// record is the changelog record of an event first seen at ts on part.
func (d *dedupe) record(part int32, key string, ts time.Time, offset int64) *kgo.Record {
	return &kgo.Record{Topic: d.topic, Partition: part, Key: []byte(key), Value: strconv.AppendInt(nil, offset, 10), Timestamp: ts}
}

// drop forgets the state of partitions the router no longer owns: it is
// read back again if they come back (another router may have fanned out
// events of them meanwhile).
func (d *dedupe) drop(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ps := range lost {
		for _, p := range ps {
			delete(d.parts, p)
		}
	}
}

// reset forgets every partition's state.
func (d *dedupe) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.parts)
}

// state returns the state of each partition of recs, reading back from
// the changelog those the router does not hold yet.
func (d *dedupe) state(ctx context.Context, recs []*kgo.Record) (map[int32]*seen, error) {
	d.mu.Lock()
	out := make(map[int32]*seen, 4)
	var missing []int32
	for _, r := range recs {
		if _, ok := out[r.Partition]; ok || slices.Contains(missing, r.Partition) {
			continue
		}
		if s := d.parts[r.Partition]; s != nil {
			out[r.Partition] = s
		} else {
			missing = append(missing, r.Partition)
		}
	}
	d.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	loaded, err := d.load(ctx, missing)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.parts == nil {
		d.parts = map[int32]*seen{}
	}
	for p, s := range loaded {
		d.parts[p] = s
		out[p] = s
	}
	return out, nil
}

// errDedupeState: the dedupe state of a partition could not be read back.
var errDedupeState = errors.New("reading back the dedupe changelog")

// errChangelogPartitions: the changelog has fewer partitions than the
// events topic (topics.Provision refuses that; someone changed it).
var errChangelogPartitions = errors.New("dedupe changelog has no partition for an events partition")

// load reads back the changelog partitions parts, read_committed, from
// what can still matter (the window before now, and at most about maxKeys
// records) to their end: the end offset when loading starts, so that
// records of a transaction still open (a previous owner's, which the group
// coordinator waits for as well) are waited for and counted only if
// committed. The last offsets may hold no record a reader gets (markers,
// compacted away): a partition whose last stable offset reached its end
// is done after two polls bring nothing.
func (d *dedupe) load(ctx context.Context, parts []int32) (map[int32]*seen, error) {
	cl, err := kgo.NewClient(d.opts...)
	if err != nil {
		return nil, fmt.Errorf("dedupe changelog client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, d.topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", d.topic, err)
	}
	byTime, err := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-d.window).UnixMilli(), d.topic)
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s by time: %w", d.topic, err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition -> offset to reach
	out := map[int32]*seen{}
	for _, p := range parts {
		end, ok := ends.Lookup(d.topic, p)
		if !ok || end.Err != nil {
			if ok && !kafkaconn.Permanent(end.Err) {
				return nil, fmt.Errorf("end offset of %s partition %d: %w", d.topic, p, end.Err)
			}
			return nil, fmt.Errorf("%s partition %d: %w", d.topic, p, errChangelogPartitions)
		}
		out[p] = newSeen()
		// A transaction writes one marker per partition, so 2*maxKeys
		// offsets hold at least maxKeys records.
		start := max(end.Offset-2*int64(d.maxKeys), 0)
		if t, ok := byTime.Lookup(d.topic, p); ok && t.Err == nil && t.Offset > start {
			start = min(t.Offset, end.Offset)
		}
		if start < end.Offset {
			from[p] = kgo.NewOffset().At(start)
			left[p] = end.Offset
		}
	}
	if len(from) == 0 {
		return out, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{d.topic: from})
	for idle := 0; len(left) > 0; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading back %s: %w", d.topic, err)
		}
		if idle = idle + 1; len(fs.Records()) > 0 {
			idle = 0
		}
		if idle >= 2 {
			stable, err := adm.ListCommittedOffsets(ctx, d.topic)
			if err != nil {
				return nil, fmt.Errorf("listing stable offsets of %s: %w", d.topic, err)
			}
			stable.Each(func(o kadm.ListedOffset) {
				if end, ok := left[o.Partition]; ok && o.Err == nil && o.Offset >= end {
					delete(left, o.Partition)
				}
			})
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if ferr == nil && kafkaconn.Permanent(err) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("reading back %s partition %d: %w", d.topic, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() && r.Value != nil {
				out[r.Partition].add(d.hash.key(string(r.Key)), r.Timestamp.UnixMilli(), d.window, d.maxKeys)
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end { // at or past the end
				delete(left, r.Partition)
			}
		})
	}
	return out, nil
}

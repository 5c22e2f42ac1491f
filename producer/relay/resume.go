package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record headers that let a starting leader recognise what is already on
// the events topic. Records without them (a direct Kafka producer's) are
// ignored.
const (
	// HeaderLSN is the commit LSN of the row's transaction ("16/B374D848");
	// "0/0" for a row published by the back-fill of a new slot.
	HeaderLSN = "hookd-lsn"
	// HeaderOutboxID is the row's outbox id (also the envelope's id).
	HeaderOutboxID = "hookd-outbox-id"
)

// rowKey names one committed outbox row: the same id committed again in
// another transaction is another row.
type rowKey struct {
	lsn pglogrepl.LSN
	id  string
}

// publishedSet is what a starting leader found on the events topic.
type publishedSet struct {
	rows map[rowKey]struct{}
	// top is the highest commit LSN among rows; past it, nothing is
	// skipped and the set is dropped.
	top pglogrepl.LSN
}

// has reports whether the row is on the topic already.
func (p *publishedSet) has(k rowKey) bool {
	if p == nil {
		return false
	}
	_, ok := p.rows[k]
	return ok
}

// scanWindow is the first number of records read back from a partition's
// end; each further window doubles it.
const scanWindow = 512

// scanIdle ends reading a window when a fetch brings nothing for this long
// (the window's last offsets were transaction markers or deleted).
const scanIdle = 2 * time.Second

// published reads the tail of every partition of the events topic, window
// by window backwards from its end, and returns the relay's rows found
// there whose commit LSN satisfies relevant. A partition's scan stops after
// a window that holds records of the relay but none relevant (everything
// before it is older), at the partition's start, or after ResumeScanLimit
// records (logged if the partition holds relay records: rows beyond the
// limit may be published again). Missing a row
// only ever means publishing it again, never skipping it.
//
// tail is a client of the relay's own that consumes nothing else: the
// scan adds the partitions it reads and removes them again.
func (r *Relay) published(ctx context.Context, tail *kgo.Client, relevant func(pglogrepl.LSN) bool) (*publishedSet, error) {
	adm := kadm.NewClient(tail)
	ends, err := adm.ListEndOffsets(ctx, r.cfg.EventsTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("reading the end offsets of %s: %w", r.cfg.EventsTopic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, r.cfg.EventsTopic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("reading the start offsets of %s: %w", r.cfg.EventsTopic, err)
	}
	scans := map[int32]*partScan{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > s.Offset {
			scans[o.Partition] = &partScan{first: s.Offset, lo: o.Offset, window: scanWindow}
		}
	})
	set := &publishedSet{rows: map[rowKey]struct{}{}}
	for len(scans) > 0 {
		if err := r.scanRound(ctx, tail, scans, set, relevant); err != nil {
			return nil, err
		}
		for p, s := range scans {
			if s.finished(r.cfg.ResumeScanLimit) {
				if s.read >= r.cfg.ResumeScanLimit && s.anyRelay && !s.older && s.lo > s.first {
					r.logger.WarnContext(ctx, "relay resume: read the scan limit without reaching rows older than the slot's position; older rows may be published again",
						"partition", p, "records_read", s.read)
				}
				delete(scans, p)
			}
		}
	}
	return set, nil
}

// partScan is one partition's backwards scan.
type partScan struct {
	first  int64 // the partition's start offset
	lo     int64 // the current window is [lo, hi)
	hi     int64
	window int64
	read   int
	// relay and relevant count the current window's relay records and
	// those relevant; older is set once a window held only older ones.
	relay, relevant int
	older           bool
	// anyRelay is set once any window held a relay record: a partition
	// only direct producers write to is read to the limit, silently.
	anyRelay bool
}

// next moves the scan one window back.
func (s *partScan) next() {
	s.hi, s.lo = s.lo, max(s.first, s.lo-s.window)
	s.window *= 2
	s.relay, s.relevant = 0, 0
}

func (s *partScan) finished(limit int) bool {
	s.older = s.relay > 0 && s.relevant == 0
	return s.older || s.lo <= s.first || s.read >= limit
}

// scanRound reads one window of every partition still scanning.
func (r *Relay) scanRound(ctx context.Context, cl *kgo.Client, scans map[int32]*partScan, set *publishedSet, relevant func(pglogrepl.LSN) bool) error {
	at := map[int32]kgo.Offset{}
	var parts []int32
	for p, s := range scans {
		s.next()
		at[p] = kgo.NewOffset().At(s.lo)
		parts = append(parts, p)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.EventsTopic: at})
	defer cl.RemoveConsumePartitions(map[string][]int32{r.cfg.EventsTopic: parts})
	open := len(scans)
	for open > 0 {
		pctx, cancel := context.WithTimeout(ctx, scanIdle)
		f := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err := fetchError(f); err != nil {
			return fmt.Errorf("reading the tail of %s: %w", r.cfg.EventsTopic, err)
		}
		if f.NumRecords() == 0 {
			return nil // the rest of the windows are markers or gone
		}
		f.EachRecord(func(rec *kgo.Record) {
			s := scans[rec.Partition]
			if s == nil || rec.Offset < s.lo || rec.Offset >= s.hi {
				return // another round's
			}
			s.read++
			if rec.Offset == s.hi-1 {
				open--
				cl.RemoveConsumePartitions(map[string][]int32{rec.Topic: {rec.Partition}})
			}
			k, ok := relayRow(rec)
			if !ok {
				return
			}
			s.relay++
			s.anyRelay = true
			if relevant(k.lsn) {
				s.relevant++
				set.rows[k] = struct{}{}
				set.top = max(set.top, k.lsn)
			}
		})
	}
	return nil
}

// fetchError is the first error of f other than the poll's own deadline.
func fetchError(f kgo.Fetches) error {
	var first error
	f.EachError(func(_ string, _ int32, err error) {
		if first == nil && !errors.Is(err, context.DeadlineExceeded) {
			first = err
		}
	})
	return first
}

// relayRow reads the row a record of the relay stands for.
func relayRow(rec *kgo.Record) (rowKey, bool) {
	var k rowKey
	var lsn, id bool
	for _, h := range rec.Headers {
		switch h.Key {
		case HeaderLSN:
			v, err := pglogrepl.ParseLSN(string(h.Value))
			k.lsn, lsn = v, err == nil
		case HeaderOutboxID:
			k.id, id = string(h.Value), true
		}
	}
	return k, lsn && id
}

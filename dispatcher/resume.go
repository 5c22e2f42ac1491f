package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkaconn"
)

// Resuming a partition (doc.go has the why). Every attempt record goes to
// the attempts partition of its source record's number and names its
// source (topic, partition, offset); every request is preceded by its
// intent record, which names its source too, on the intents topic (one
// partition). When a partition is assigned, the poll loop holds its first
// fetched records, reads that attempts partition and the intents topic
// back (readBack) and admits them marked: answered records finish without
// a request, and for an intent without its attempt record the request's
// attempt record of outcome unknown is made from its delivery record and
// produced to the attempts partition (recordUnknown). All of it is I/O at
// the edge, on the poll loop's goroutine; the core only sees records
// marked Answered.

// readBackTimeout bounds one read-back. Past it the partitions' records
// are admitted unmarked: attempted again from the committed offset, as
// they were before read-backs (duplicates, never a skip).
const readBackTimeout = 30 * time.Second

// resumeGrace is how long a read-back after a broker fault goes on
// reading: past its own start, for intents still to come, and past an
// intent's request deadline, for its attempt record. A partition is lost
// without a revoke (nothing waits for its requests) when its owner's
// membership ends under it: a broker restarted without its group state
// (the embedded one after kill -9), or frozen past the session timeout.
// Its next owner may be assigned it while the old one, not knowing yet,
// still runs requests, starts new ones until its next heartbeat fails,
// and records them late, its producer recovering from the fault
// (TestChaosBrokerRestart: an intent written 0.14 s after the new owner's
// read-back began; an attempt record 5 s after its answer).
const resumeGrace = 5 * time.Second

// resumer is the poll loop's state of the partitions to resume. The
// rebalance callbacks mark and forget partitions, hence the lock.
type resumer struct {
	mu sync.Mutex
	// fresh partitions are assigned and have not fetched a record yet.
	fresh map[sched.Partition]bool
	// answered are the offsets found answered, until they are fetched.
	answered map[sched.Partition]map[int64]bool
}

func (r *resumer) assign(parts []sched.Partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fresh == nil {
		r.fresh, r.answered = map[sched.Partition]bool{}, map[sched.Partition]map[int64]bool{}
	}
	for _, p := range parts {
		r.fresh[p] = true
		delete(r.answered, p)
	}
}

func (r *resumer) forget(parts []sched.Partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		delete(r.fresh, p)
		delete(r.answered, p)
	}
}

// inflight counts, per topic partition, this process's requests started
// and not yet completed (attempt record acknowledged, or given up). A
// partition lost in a broker outage (no revoke, so nothing waited for its
// requests) and assigned back to this process may still have requests
// finishing, their attempt records waiting for the broker; its read-back
// waits for them first, or it would miss those records and send their
// deliveries again (TestChaosBrokerDown120s saw one such duplicate). Only
// requests of the same topic partition count: its records are not
// admitted before its read-back, so those are all from before.
type inflight struct {
	mu   sync.Mutex
	n    map[sched.Partition]int
	zero chan struct{} // closed and replaced whenever a count drops to 0
}

func (f *inflight) add(p sched.Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n, f.zero = map[sched.Partition]int{}, make(chan struct{})
	}
	f.n[p]++
}

func (f *inflight) done(p sched.Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[p]--; f.n[p] <= 0 {
		delete(f.n, p)
		close(f.zero)
		f.zero = make(chan struct{})
	}
}

// wait returns once no request of the partitions of starts is in flight,
// or ctx ends.
func (f *inflight) wait(ctx context.Context, starts map[sched.Partition]time.Time) {
	for {
		f.mu.Lock()
		busy, zero := false, f.zero
		for p := range starts {
			busy = busy || f.n[p] > 0
		}
		f.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-zero:
		}
	}
}

// resume marks the records of recs that were answered, after reading back
// the attempts of the partitions fetched for the first time since their
// assignment.
func (d *Dispatcher) resume(ctx context.Context, recs []sched.Record) {
	starts := d.resumeStarts(recs)
	if len(starts) > 0 {
		begun := time.Now()
		wctx, cancel := context.WithTimeout(ctx, readBackTimeout)
		d.inflight.wait(wctx, starts)
		cancel()
		found, err := d.readBack(ctx, starts)
		d.m.resumeSeconds.Observe(time.Since(begun).Seconds())
		d.res.mu.Lock()
		for p := range starts {
			delete(d.res.fresh, p)
			if err == nil && len(found.answered[p]) > 0 {
				d.res.answered[p] = found.answered[p]
			}
		}
		d.res.mu.Unlock()
		switch {
		case err != nil && ctx.Err() != nil:
			// Stopping: the core admits nothing more.
		case err != nil:
			d.m.resumeFailures.Inc()
			d.log.WarnContext(ctx, "reading back attempts failed; the partitions' records are attempted again from the committed offset",
				"partitions", len(starts), "error", err)
		default:
			d.recordUnknown(ctx, found.unknown, recs)
		}
	}
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	for i := range recs {
		set := d.res.answered[recs[i].Part]
		if set == nil {
			continue
		}
		if set[recs[i].Offset] {
			recs[i].Answered = true
			delete(set, recs[i].Offset)
		}
		if len(set) == 0 {
			delete(d.res.answered, recs[i].Part)
		}
	}
}

// resumeStarts returns, for each fresh partition with records in recs,
// when its read-back starts: ResumeMargin before its first record was
// written, or was due if later (a tier partition attempts its records in
// order, each once due).
func (d *Dispatcher) resumeStarts(recs []sched.Record) map[sched.Partition]time.Time {
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	var starts map[sched.Partition]time.Time
	for i := range recs {
		r := &recs[i]
		if !d.res.fresh[r.Part] {
			continue
		}
		if _, ok := starts[r.Part]; ok {
			continue
		}
		at := r.Ref.(*record).rec.Timestamp
		if r.DueAt.After(at) {
			at = r.DueAt
		}
		if starts == nil {
			starts = map[sched.Partition]time.Time{}
		}
		starts[r.Part] = at.Add(-d.cfg.ResumeMargin)
	}
	return starts
}

// readBackResult is what a read-back found.
type readBackResult struct {
	answered map[sched.Partition]map[int64]bool
	// unknown are intents without their attempt records.
	unknown []intent
}

// intent is an intent read back.
type intent struct {
	attempt.Intent
	kr    *kgo.Record // its intent record
	index int         // its place in kr
	after *followUp   // its retry record or dead letter, if found
}

// topicPart is a partition read back.
type topicPart struct {
	topic string
	part  int32
}

// readBack reads the attempts partitions of starts' partitions (same
// numbers) from the earliest start of each, and the intents topic from the
// earliest start of all, to their end offsets now, with a client of its
// own (no group), and returns the source offsets answered and the intents
// left without an attempt record. Intent records on the attempts topic
// (from dispatchers before the intents topic) count as well.
func (d *Dispatcher) readBack(ctx context.Context, starts map[sched.Partition]time.Time) (readBackResult, error) {
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	from := map[topicPart]time.Time{}
	for p, at := range starts {
		tps := []topicPart{{d.names.Attempts, p.Partition}, {d.names.Intents, 0}, {d.names.DLQ, p.Partition}}
		for _, t := range d.names.Retry {
			tps = append(tps, topicPart{t, p.Partition})
		}
		for _, tp := range tps {
			if f, ok := from[tp]; !ok || at.Before(f) {
				from[tp] = at
			}
		}
	}
	// Control records are kept, and dropped by add: a partition that ends
	// in a transaction's marker (the DLQ: the router dead-letters in
	// transactions) would otherwise never reach its end offset.
	cl, err := kgo.NewClient(append(slices.Clip(d.plainOpts), kgo.KeepControlRecords())...)
	if err != nil {
		return readBackResult{}, fmt.Errorf("attempts read-back client: %w", err)
	}
	defer cl.Close()
	offsets, ends, err := d.readBackRange(ctx, kadm.NewClient(cl), from)
	if err != nil {
		return readBackResult{}, err
	}
	rb := readBackState{starts: starts, intents: map[string]intent{}, seen: map[string]bool{},
		answered: map[sched.Partition]map[int64]bool{}, followUps: map[attempt.Position]followUp{},
		tiers: d.tierOf, dlq: d.names.DLQ}
	if len(offsets) > 0 {
		cl.AddConsumePartitions(offsets)
		if err := d.readUntil(ctx, cl, ends, d.readBackTopics(), rb.add); err != nil {
			return readBackResult{}, err
		}
		if err := d.awaitRunning(ctx, cl, &rb); err != nil {
			return readBackResult{}, err
		}
	}
	return rb.result(), nil
}

// awaitRunning goes on reading the attempts partitions while a previous
// owner may still write to them (resumeGrace has the why), when this
// process saw a fetch, commit or produce fail within SessionTimeout plus
// resumeGrace, or fail until then (outage.failedWithin): a broker fault
// may have ended members' sessions without a revoke. It reads for
// resumeGrace after it began (intents written meanwhile count too), and
// while an intent without its attempt record
// may still get one: until its request's deadline (its start plus
// Timeout, the longest any request runs) plus resumeGrace. Otherwise it
// does not wait: a graceful rebalance's previous owners revoked and
// finished before anyone was assigned, and a crashed one writes nothing
// more. The wait takes half of readBackTimeout at most, and ends a second
// before ctx's deadline; an intent still without its attempt record then
// is sent again, as before (outcome unknown).
func (d *Dispatcher) awaitRunning(ctx context.Context, cl *kgo.Client, rb *readBackState) error {
	if !d.kafkaFailedWithin(d.cfg.SessionTimeout + resumeGrace) {
		return nil
	}
	begun := time.Now()
	floor := d.clock.Now().Add(resumeGrace)
	stop := begun.Add(readBackTimeout / 2)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-time.Second).Before(stop) {
		stop = dl.Add(-time.Second)
	}
	for {
		until := maxTime(floor, rb.pendingUntil(d.cfg.Timeout+resumeGrace))
		wait := min(until.Sub(d.clock.Now()), time.Until(stop))
		if wait <= 0 {
			d.log.InfoContext(ctx, "read the attempts topic on after a Kafka failure, for previous owners still finishing",
				"waited", time.Since(begun).Round(time.Millisecond), "intents_without_attempt", rb.pending())
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading back %s: %w", d.readBackTopics(), err)
		}
		if err := d.permanentFetchErr(fs); err != nil {
			return err
		}
		fs.EachRecord(rb.add)
	}
}

// kafkaFailedWithin reports whether a fetch, commit or produce of this
// process failed within d of now.
func (d *Dispatcher) kafkaFailedWithin(dur time.Duration) bool {
	return d.fetchOutage.failedWithin(dur) || d.commitOutage.failedWithin(dur) || d.produceOutage.failedWithin(dur)
}

// readBackRange lists, for the partitions of from, the offset of the
// first record at or after its time and the end offset; partitions with
// nothing between have no end and start at their end offset.
func (d *Dispatcher) readBackRange(ctx context.Context, adm *kadm.Client, from map[topicPart]time.Time) (map[string]map[int32]kgo.Offset, map[topicPart]int64, error) {
	endOffs, err := adm.ListEndOffsets(ctx, slices.Concat([]string{d.names.Attempts, d.names.Intents, d.names.DLQ}, d.names.Retry)...)
	if err != nil {
		return nil, nil, fmt.Errorf("listing end offsets of %s: %w", d.readBackTopics(), err)
	}
	offsets, ends := map[string]map[int32]kgo.Offset{}, map[topicPart]int64{}
	for tp, at := range from {
		t, p := tp.topic, tp.part
		end, ok := endOffs.Lookup(t, p)
		if !ok || end.Err != nil {
			return nil, nil, fmt.Errorf("end offset of %s partition %d: %v", t, p, end.Err)
		}
		byTime, err := adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), t)
		if err != nil {
			return nil, nil, fmt.Errorf("listing offsets of %s by time: %w", t, err)
		}
		start, ok := byTime.Lookup(t, p)
		if !ok || start.Err != nil {
			return nil, nil, fmt.Errorf("offset of %s partition %d at %s: %v", t, p, at, start.Err)
		}
		if offsets[t] == nil {
			offsets[t] = map[int32]kgo.Offset{}
		}
		if start.Offset >= 0 && start.Offset < end.Offset {
			offsets[t][p], ends[tp] = kgo.NewOffset().At(start.Offset), end.Offset
		} else {
			offsets[t][p] = kgo.NewOffset().At(end.Offset) // for awaitRunning
		}
	}
	return offsets, ends, nil
}

// readUntil polls cl, handing each record to f, until every partition of
// ends reached its end offset; what names the records in errors.
func (d *Dispatcher) readUntil(ctx context.Context, cl *kgo.Client, ends map[topicPart]int64, what string, f func(*kgo.Record)) error {
	left := maps.Clone(ends)
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading back %s: %w", what, err)
		}
		if err := d.permanentFetchErr(fs); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			// Records written since the read-back started are handed
			// over too: a previous owner still finishing its requests
			// writes them (awaitRunning).
			f(r)
			tp := topicPart{r.Topic, r.Partition}
			if end, ok := left[tp]; ok && r.Offset+1 >= end {
				delete(left, tp)
			}
		})
	}
	return nil
}

// readBackTopics names the topics a read-back reads, for errors.
func (d *Dispatcher) readBackTopics() string {
	return d.names.Attempts + ", " + d.names.Intents + ", the retry tiers and " + d.names.DLQ
}

// permanentFetchErr is the first permanent error of a read-back's fetch.
func (d *Dispatcher) permanentFetchErr(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr == nil && kafkaconn.Permanent(err) && !errors.Is(err, context.DeadlineExceeded) {
			ferr = fmt.Errorf("reading back %s partition %d: %w", t, p, err)
		}
	})
	return ferr
}

// readBackState gathers a read-back's findings.
type readBackState struct {
	starts   map[sched.Partition]time.Time
	intents  map[string]intent // by attempt id
	seen     map[string]bool   // attempt ids of attempt records
	answered map[sched.Partition]map[int64]bool
	// followUps are the retry records and dead letters found, by source
	// (followup.go).
	followUps map[attempt.Position]followUp
	tiers     map[string]int // the retry tiers' topics
	dlq       string
}

// add takes one record read back: of a partition being resumed, an
// intent is kept until its attempt record comes (the same attempt id),
// and an attempt record but an unknown one marks its source answered.
func (s *readBackState) add(kr *kgo.Record) {
	if kr.Attrs.IsControl() {
		return
	}
	if _, ok := s.tiers[kr.Topic]; ok {
		s.addRetry(kr)
		return
	}
	if kr.Topic == s.dlq {
		s.addDeadLetter(kr)
		return
	}
	if attempt.IsIntent(kr) {
		s.addIntents(kr)
		return
	}
	r, err := attempt.Decode(kr)
	if err != nil || r.Source == nil {
		return // not storable, or from a dispatcher before sources
	}
	src := sched.Partition{Topic: r.Source.Topic, Partition: r.Source.Partition}
	if _, ok := s.starts[src]; !ok {
		return
	}
	s.seen[r.AttemptID] = true
	if r.Outcome == attempt.OutcomeUnknown {
		return // a request whose answer nobody saw: it is sent again
	}
	if isRetryInPlace(kr) {
		return // a FIFO record's failed attempt: still to deliver (fifo.go)
	}
	if s.answered[src] == nil {
		s.answered[src] = map[int64]bool{}
	}
	s.answered[src][r.Source.Offset] = true
}

// addIntents keeps the intents of kr (an intent record) for the
// partitions being resumed.
func (s *readBackState) addIntents(kr *kgo.Record) {
	ins, err := attempt.DecodeIntents(kr)
	if err != nil {
		return // not storable
	}
	for i, in := range ins {
		src := sched.Partition{Topic: in.Source.Topic, Partition: in.Source.Partition}
		if _, ok := s.starts[src]; !ok {
			continue
		}
		s.intents[in.AttemptID] = intent{Intent: in, kr: kr, index: i}
	}
}

// pendingUntil is how long an intent without its attempt record may
// still get one: the latest, over those intents, of its start plus
// running (a request's deadline and the grace); zero when there is none.
func (s *readBackState) pendingUntil(running time.Duration) time.Time {
	var until time.Time
	for id, in := range s.intents {
		if !s.seen[id] {
			until = maxTime(until, in.StartedAt.Add(running))
		}
	}
	return until
}

// pending counts the intents without their attempt records.
func (s *readBackState) pending() int {
	n := 0
	for id := range s.intents {
		if !s.seen[id] {
			n++
		}
	}
	return n
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (s *readBackState) result() readBackResult {
	out := readBackResult{answered: s.answered}
	for id, in := range s.intents {
		if !s.seen[id] {
			if f, ok := s.followUpFor(in.Intent); ok {
				in.after = &f
			}
			out.unknown = append(out.unknown, in)
		}
	}
	// In the order they were written: by topic (attempts first, from older
	// dispatchers), then offset and place in the record.
	slices.SortFunc(out.unknown, func(a, b intent) int {
		return cmp.Or(cmp.Compare(a.kr.Topic, b.kr.Topic), cmp.Compare(a.kr.Offset, b.kr.Offset), cmp.Compare(a.index, b.index))
	})
	return out
}

// recordUnknown produces the attempt records of the intents found without
// theirs: each made from its delivery record (in recs, the partitions'
// first fetch, or read again at its source position) as the attempt
// record of a request whose outcome is unknown (started_at: when it was
// sent). Their attempt ids are the intents', so a second read-back that
// finds an intent again (this produce failed, or it raced a crash) writes
// the same row. Failures are logged; the intent stays, found again next
// time.
func (d *Dispatcher) recordUnknown(ctx context.Context, intents []intent, recs []sched.Record) {
	if len(intents) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	sources, err := d.sourceRecords(pctx, intents, recs)
	if err != nil {
		d.log.WarnContext(ctx, "reading the delivery records of requests with an unknown outcome failed; those found are recorded, the others at the partition's next assignment",
			"error", err)
	}
	var out []*kgo.Record
	number := map[*kgo.Record]int{}
	followed := 0 // of out: the follow-up tells the outcome, not sent again
	for _, in := range intents {
		r := sources[in.Source]
		if r == nil {
			if err == nil {
				d.log.WarnContext(ctx, "the delivery record of a request with an unknown outcome is gone (retention?); the request is not recorded",
					"attempt_id", in.AttemptID, "topic", in.Source.Topic, "partition", in.Source.Partition, "offset", in.Source.Offset)
			}
			continue
		}
		rec := unknownAttempt(in.Intent, r)
		if in.after != nil {
			followedAttempt(rec, *in.after)
			followed++
		}
		kr, err := rec.KafkaRecord(d.names.Attempts)
		if err != nil {
			d.log.WarnContext(ctx, "a request with an unknown outcome cannot be recorded", "attempt_id", in.AttemptID, "error", err)
			continue
		}
		kr.Partition = in.Source.Partition
		out = append(out, kr)
		number[kr] = in.Attempt
	}
	for _, res := range d.cl.ProduceSync(pctx, out...) {
		if res.Err != nil {
			d.m.produceErrors.Inc()
			d.log.WarnContext(ctx, "producing the attempt record of a request with an unknown outcome failed; it is retried at the partition's next assignment",
				"partition", res.Record.Partition, "error", res.Err)
			continue
		}
		d.m.resumeUnknown.Inc()
		d.m.attemptsBy.get(attemptKey{outcome: attempt.OutcomeUnknown, attempt: number[res.Record]}).Inc()
	}
	d.log.InfoContext(ctx, "recorded requests a previous owner stopped during (outcome unknown); their deliveries are attempted again",
		"requests", len(out), "intents", len(intents), "outcome_from_follow_up", followed)
}

// unknownAttempt is the attempt record of in's request, of outcome
// unknown, r its delivery record.
func unknownAttempt(in attempt.Intent, r *record) *attempt.Record {
	dl := *r.d
	dl.Attempt = in.Attempt
	res := result{startedAt: in.StartedAt, attemptID: in.AttemptID}
	if in.Destination != "" {
		res.destination, res.bodySHA256 = in.Destination, bodyDigest(dl.Body)
	}
	rec := attemptRecord(&record{rec: r.rec, d: &dl}, res, plan{outcome: attempt.OutcomeUnknown, action: attempt.NextRetry})
	rec.Error = attempt.ErrorUnknown
	return &rec
}

// sourceRecords are the delivery records at the source positions of
// intents: from recs, or fetched by offset with a client of its own.
func (d *Dispatcher) sourceRecords(ctx context.Context, intents []intent, recs []sched.Record) (map[attempt.Position]*record, error) {
	found := map[attempt.Position]*record{}
	for i := range recs {
		if r, ok := recs[i].Ref.(*record); ok && r.d != nil {
			found[attempt.Position{Topic: r.rec.Topic, Partition: r.rec.Partition, Offset: r.rec.Offset}] = r
		}
	}
	firsts, ends := map[topicPart]int64{}, map[topicPart]int64{}
	for _, in := range intents {
		p := in.Source
		if found[p] != nil {
			continue
		}
		tp := topicPart{p.Topic, p.Partition}
		if first, ok := firsts[tp]; !ok || p.Offset < first {
			firsts[tp] = p.Offset
		}
		ends[tp] = max(ends[tp], p.Offset+1)
	}
	if len(ends) == 0 {
		return found, nil
	}
	offsets := map[string]map[int32]kgo.Offset{}
	for tp, first := range firsts {
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]kgo.Offset{}
		}
		offsets[tp.topic][tp.part] = kgo.NewOffset().At(first)
	}
	cl, err := kgo.NewClient(append(slices.Clip(d.plainOpts), kgo.ConsumePartitions(offsets))...)
	if err != nil {
		return found, fmt.Errorf("delivery records client: %w", err)
	}
	defer cl.Close()
	err = d.readUntil(ctx, cl, ends, "delivery records", func(kr *kgo.Record) {
		if dl, err := delivery.Decode(kr); err == nil {
			found[attempt.Position{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset}] = &record{rec: kr, d: dl}
		}
	})
	return found, err
}

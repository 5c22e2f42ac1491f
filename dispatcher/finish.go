package dispatcher

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
)

// result is what happened to one record: an attempt, or a decision taken
// instead of one.
type result struct {
	startedAt time.Time     // dispatcher clock
	duration  time.Duration // wall clock
	status    int
	excerpt   string
	err       error
	verdict   Verdict
	attempted bool // a request was sent (or refused by the breaker)
	aborted   bool // cut by shutdown: leave the record unfinished

	destination string // the endpoint URL the request went to (attempted only)
	bodySHA256  string // bodyDigest of the body sent, with destination
	attemptID   string // its intent's (attempted only); else a new one
	traceparent string // the attempt span's, when tracing is on (trace.go)

	skip      string // ClassDisabled, ClassDeleted or ClassAccountMismatch: no request
	deferred  string // ClassBacklogFull or ClassFairShare: no request
	malformed bool   // not a delivery record
}

// plan is what happens to a record after its result.
type plan struct {
	action     attempt.NextAction
	tier       int // with NextRetry
	due        time.Time
	reason     string // with NextDeadLetter
	next       delivery.Delivery
	outcome    attempt.Outcome
	errorClass string
}

// decide turns a result into a plan. It is pure given now.
func (d *Dispatcher) decide(dl *delivery.Delivery, res result, now time.Time) plan {
	p := plan{next: *dl}
	switch {
	case res.skip != "":
		p.outcome, p.errorClass, p.action = attempt.OutcomeSkipped, res.skip, attempt.NextDeadLetter
		p.reason = skipReason(res.skip)
		return p
	case res.deferred != "":
		p.outcome, p.errorClass, p.action = attempt.OutcomeDeferred, res.deferred, attempt.NextRetry
		p.next.Deferrals = dl.Deferrals + 1
		p.tier, p.due = d.policy.Defer(p.next.Deferrals, now)
		p.next.DueAt = p.due
		return p
	}
	v := res.verdict
	p.outcome, p.errorClass = v.Outcome, v.ErrorClass
	// An attempt was spent (a circuit_open refusal counts: the schedule,
	// not the breaker, bounds how long a delivery is retried).
	p.next.Attempt = dl.Attempt + 1
	p.next.Deferrals = 0
	if p.next.FirstAttempt.IsZero() {
		p.next.FirstAttempt = res.startedAt
	}
	p.next.LastStatus = res.status
	p.next.LastError = v.ErrorClass
	p.next.ClientErrors = v.ClientErrors
	switch v.Outcome {
	case attempt.OutcomeDelivered:
		p.action = attempt.NextDone
	case attempt.OutcomeRetry, attempt.OutcomeCircuitOpen:
		tier, due, ok := d.policy.Next(dl.Attempt, now, v.RetryAfter)
		if !ok {
			p.action, p.reason = attempt.NextDeadLetter, deadletter.ReasonRetriesExhausted
			return p
		}
		p.action, p.tier, p.due = attempt.NextRetry, tier, due
		p.next.DueAt = due
	default: // gone, permanent, refused
		p.action, p.reason = attempt.NextDeadLetter, v.DeadReason
		if p.reason == "" {
			p.reason = deadletter.ReasonClientError
		}
	}
	return p
}

// skipReason is the dead-letter reason of a record skipped for class.
func skipReason(class string) string {
	switch class {
	case ClassDisabled:
		return deadletter.ReasonEndpointDisabled
	case ClassAccountMismatch:
		return deadletter.ReasonAccountMismatch
	}
	return deadletter.ReasonEndpointDeleted
}

// finish produces what res calls for (a retry record, a dead letter) and
// the attempt record, each acknowledged by the broker, and only then hands
// the loop the record's completion. A failed produce is retried until
// Kafka answers (d.produce); if shutdown cuts it the record stays
// unfinished. The attempt record, produced last, completes the record from
// its promise: the caller does not wait for its acknowledgement. The
// completion ends the record's count in d.wg (loop.go, apply).
func (d *Dispatcher) finish(it *sched.Item, res result) {
	if !d.finishRecord(it, res) {
		d.complete(it, false)
	}
}

// complete hands the loop it's completion: done (its offset may be
// committed) or abandoned (it is read again after a restart).
func (d *Dispatcher) complete(it *sched.Item, ok bool) {
	if r := recordOf(it); r.started {
		r.started = false
		d.inflight.done(sched.Partition{Topic: r.rec.Topic, Partition: r.rec.Partition})
	}
	d.events <- event{it: it, finished: true, ok: ok}
	d.wg.Done()
}

// finishRecord produces what res calls for and then the attempt record,
// which completes it. It returns false, without completing it, when it
// stays unfinished.
func (d *Dispatcher) finishRecord(it *sched.Item, res result) bool {
	r := recordOf(it)
	if res.malformed {
		return d.deadLetterMalformed(it, r.rec)
	}
	if res.aborted {
		return false
	}
	now := d.clock.Now()
	if res.startedAt.IsZero() {
		res.startedAt = now
	}
	p := d.decide(r.d, res, now)
	rec := attemptRecord(r, res, p)
	switch p.action {
	case attempt.NextRetry:
		if it.FIFO() {
			return d.retryInPlace(it, r, rec, p, res.traceparent) // fifo.go
		}
		next := p.next.Record(d.names.Retry[p.tier])
		next.Partition = r.rec.Partition
		next.Headers = append(next.Headers, sourceHeader(r.rec)) // followup.go
		if _, err := d.produce(d.workCtx, next); err != nil {
			return d.produceFailed("retry record", r.rec, err)
		}
		rec.NextDueAt = p.due
	case attempt.NextDeadLetter:
		pos, err := d.produce(d.workCtx, deadletter.Record(d.names.DLQ, r.rec, provenance(r, res, p, now)))
		if err != nil {
			return d.produceFailed("dead letter", r.rec, err)
		}
		rec.DLQ = &attempt.Position{Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset}
		rec.DeadReason = p.reason
		d.m.deadLetters.WithLabelValues(p.reason).Inc()
	}
	key := attemptKey{p.outcome, r.d.Attempt}
	kr, err := rec.KafkaRecord(d.names.Attempts)
	if err != nil {
		d.log.Error("invalid attempt record, not produced", "delivery_id", r.d.ID, "error", err)
		d.m.attemptsBy.get(key).Inc()
		d.complete(it, true)
		return true
	}
	kr.Partition = r.rec.Partition // next to its intent, where a resume reads
	withTraceparent(kr, res.traceparent)
	if p.action == attempt.NextDone && it.FIFO() {
		d.events <- event{it: it, release: true} // its endpoint's next record may go (fifo.go)
	}
	d.produceAttempt(d.workCtx, it, kr, key)
	return true
}

// deadLetterMalformed dead-letters src, which is not a delivery record,
// and completes it.
func (d *Dispatcher) deadLetterMalformed(it *sched.Item, src *kgo.Record) bool {
	dead := deadletter.Record(d.names.DLQ, src, deadletter.Provenance{
		OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
		ErrorClass: "malformed", Reason: deadletter.ReasonMalformed, DeadAt: d.clock.Now(),
	})
	if _, err := d.produce(d.workCtx, dead); err != nil {
		return d.produceFailed("dead letter", src, err)
	}
	d.m.deadLetters.WithLabelValues(deadletter.ReasonMalformed).Inc()
	d.complete(it, true)
	return true
}

// withTraceparent adds the attempt span's traceparent (empty when
// tracing is off) to its attempt record: the attempt-log writer's span
// continues the attempt's.
func withTraceparent(kr *kgo.Record, traceparent string) {
	if traceparent != "" {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: delivery.HeaderTraceparent, Value: []byte(traceparent)})
	}
}

// attemptRecord is the attempt log's record of r's result under plan p.
func attemptRecord(r *record, res result, p plan) attempt.Record {
	dl := r.d
	id := res.attemptID
	if id == "" {
		id = newAttemptID()
	}
	rec := attempt.Record{
		AttemptID:       id,
		DeliveryID:      dl.ID,
		EventID:         dl.EventID,
		EventType:       dl.EventType,
		EndpointID:      dl.EndpointID,
		Account:         dl.Account,
		EventCreated:    dl.EventCreated,
		Attempt:         dl.Attempt,
		Tier:            r.rec.Topic,
		StartedAt:       res.startedAt,
		Duration:        res.duration,
		StatusCode:      res.status,
		Outcome:         p.outcome,
		ErrorClass:      p.errorClass,
		ResponseExcerpt: res.excerpt,
		NextAction:      p.action,
		ReplayID:        dl.ReplayID,
		Source:          &attempt.Position{Topic: r.rec.Topic, Partition: r.rec.Partition, Offset: r.rec.Offset},
	}
	if res.err != nil {
		rec.Error = truncate(res.err.Error(), 512)
	}
	if res.destination != "" {
		rec.Destination, rec.BodySHA256 = res.destination, res.bodySHA256
	}
	return rec
}

// provenance is the dead letter's account of r's delivery.
func provenance(r *record, res result, p plan, now time.Time) deadletter.Provenance {
	src, dl := r.rec, r.d
	prov := deadletter.Provenance{
		OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
		Attempts: dl.Attempt - 1, FirstAttempt: dl.FirstAttempt, LastStatus: dl.LastStatus,
		ErrorClass: p.errorClass, Reason: p.reason, DeadAt: now,
	}
	if res.attempted {
		prov.Attempts, prov.FirstAttempt, prov.LastAttempt = dl.Attempt, p.next.FirstAttempt, res.startedAt
		prov.LastStatus = res.status
	}
	return prov
}

// produceAttempt produces it's attempt record and completes it once the
// broker acknowledged it, from kgo's promise: no goroutine waits for the
// acknowledgement. A failed produce is retried as d.produce retries, on a
// goroutine of its own.
func (d *Dispatcher) produceAttempt(ctx context.Context, it *sched.Item, kr *kgo.Record, key attemptKey) {
	w := attemptPool.Get().(*attemptWaiter)
	w.d, w.ctx, w.it, w.key, w.tick = d, ctx, it, key, d.slowProduces.start()
	d.cl.Produce(ctx, kr, w.promise) // kgo calls the promise exactly once
}

// attemptWaiter carries an attempt record's produce to its promise; it
// and its promise are pooled.
type attemptWaiter struct {
	d       *Dispatcher
	ctx     context.Context
	it      *sched.Item
	key     attemptKey
	tick    int64
	promise func(*kgo.Record, error)
}

var attemptPool sync.Pool

func init() {
	// Set here: New refers to produced, which puts back into the pool.
	attemptPool.New = func() any {
		w := &attemptWaiter{}
		w.promise = w.produced
		return w
	}
}

// produced runs in kgo's promise: it must not block.
func (w *attemptWaiter) produced(r *kgo.Record, err error) {
	d, ctx, it, key := w.d, w.ctx, w.it, w.key
	d.slowProduces.done(w.tick)
	*w = attemptWaiter{promise: w.promise}
	attemptPool.Put(w)
	if err == nil {
		d.produceOutage.ok(ctx, d.log)
		d.m.attemptsBy.get(key).Inc()
		d.complete(it, true)
		return
	}
	go func() {
		if _, err := d.retryProduce(ctx, d.cl, r, err); err != nil {
			d.complete(it, d.produceFailed("attempt record", recordOf(it).rec, err))
			return
		}
		d.m.attemptsBy.get(key).Inc()
		d.complete(it, true)
	}()
}

func (d *Dispatcher) produceFailed(what string, src *kgo.Record, err error) bool {
	d.m.produceErrors.Inc()
	d.log.Error("producing "+what+" failed; the source record stays unfinished and will be re-read",
		"topic", src.Topic, "partition", src.Partition, "offset", src.Offset, "error", err)
	return false
}

// bodyDigest is the evidence of what was sent: the lowercase hex SHA-256
// of the request body, which send posts unchanged. One hash per record
// that made a request; one allocation, the hex string the record carries.
func bodyDigest(body []byte) string {
	sum := sha256.Sum256(body)
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	return string(buf[:])
}

// newAttemptID returns "att_" and 24 random hex digits, in one
// allocation.
func newAttemptID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	var id [4 + 2*len(b)]byte
	copy(id[:], "att_")
	hex.Encode(id[4:], b[:])
	return string(id[:])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

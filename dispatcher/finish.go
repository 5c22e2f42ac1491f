package dispatcher

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/retrytiers"
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

	skip      string // ClassDisabled, ClassDeleted or ClassAccountMismatch: no request
	deferred  string // ClassBacklogFull or ClassFairShare: no request
	malformed error  // not a delivery record
}

// attempt makes one HTTP attempt of it, through its endpoint's breaker.
func (d *Dispatcher) attempt(it *item) result {
	dl := it.d
	res := result{startedAt: d.clock.Now()}
	// Read again: the endpoint may have changed while the record waited.
	t, ok := d.endpoints.Endpoint(dl.EndpointID)
	if res.skip = skipClass(t, ok, dl); res.skip != "" {
		return res
	}
	res.attempted = true
	start := time.Now()
	ticket, err := d.breakers.allow(t.ID)
	if err != nil {
		res.err = err
		res.verdict = Classify(0, err, 0, dl.ClientErrors)
		return res
	}
	res.destination = t.URL // a request is made: the evidence names where it went
	first := dl.Attempt == 1 && it.rec.Topic == d.names.Deliveries
	if first {
		observeSince(d.m.stageWait, it.rec.Timestamp, start)
	}
	resp := d.sender.send(d.workCtx, t, dl, d.timeout(t))
	res.duration = time.Since(start)
	if first {
		d.m.stageHTTP.Observe(res.duration.Seconds())
	}
	res.status, res.excerpt, res.err = resp.status, resp.excerpt, resp.err
	var ra time.Duration
	if resp.retryAfter != "" {
		ra, _ = retrytiers.ParseRetryAfter(resp.retryAfter, time.Now())
	}
	res.verdict = Classify(resp.status, resp.err, ra, dl.ClientErrors)
	d.breakers.done(ticket, res.verdict.Breaker)
	if res.verdict.ErrorClass == ClassSSRF {
		d.refusals.warn(d.log, t, resp.err)
	}
	d.m.latencyBy.get(res.verdict.Outcome).Observe(res.duration.Seconds())
	if res.err != nil && d.workCtx.Err() != nil {
		// Aborted by shutdown, not the endpoint's doing: leave the record
		// unfinished so it is attempted again after the restart.
		res.aborted = true
	}
	return res
}

// observeSince observes from to now into o, clamping clock skew between
// the machines (the record's timestamp is its producer's clock) to 0.
func observeSince(o prometheus.Observer, from, now time.Time) {
	if from.IsZero() {
		return
	}
	o.Observe(max(now.Sub(from), 0).Seconds())
}

// timeout is t's own timeout when shorter than the operator's Timeout,
// which is the ceiling.
func (d *Dispatcher) timeout(t Target) time.Duration {
	if t.Timeout > 0 {
		return min(t.Timeout, d.cfg.Timeout)
	}
	return d.cfg.Timeout
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
// the attempt record, each acknowledged by the broker, and only then marks
// the source record done. A failed produce is retried until Kafka answers
// (d.produce); if shutdown cuts it the record stays unfinished. The
// attempt record, produced last, completes the record from its promise:
// the caller does not wait for its acknowledgement. finish ends the
// request's count in d.wg (startLocked, startFinishLocked) when the record
// is complete.
func (d *Dispatcher) finish(it *item, res result) {
	if !d.finishRecord(it, res) {
		d.complete(it, false)
	}
}

// complete marks it done (or abandoned) once its records are acknowledged.
func (d *Dispatcher) complete(it *item, ok bool) {
	d.mu.Lock()
	d.doneLocked(it, ok)
	d.mu.Unlock()
	d.wg.Done()
}

// finishRecord produces what res calls for and then the attempt record,
// which completes it. It returns false, without completing it, when it
// stays unfinished.
func (d *Dispatcher) finishRecord(it *item, res result) bool {
	ctx := d.workCtx
	src := it.rec
	if res.malformed != nil {
		dead := deadletter.Record(d.names.DLQ, src, deadletter.Provenance{
			OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
			ErrorClass: "malformed", Reason: deadletter.ReasonMalformed, DeadAt: d.clock.Now(),
		})
		if _, err := d.produce(ctx, dead); err != nil {
			return d.produceFailed("dead letter", src, err)
		}
		d.m.deadLetters.WithLabelValues(deadletter.ReasonMalformed).Inc()
		d.complete(it, true)
		return true
	}
	if res.aborted {
		return false
	}
	dl := it.d
	now := d.clock.Now()
	if res.startedAt.IsZero() {
		res.startedAt = now
	}
	p := d.decide(dl, res, now)
	rec := attempt.Record{
		AttemptID:       newAttemptID(),
		DeliveryID:      dl.ID,
		EventID:         dl.EventID,
		EventType:       dl.EventType,
		EndpointID:      dl.EndpointID,
		Account:         dl.Account,
		EventCreated:    dl.EventCreated,
		Attempt:         dl.Attempt,
		Tier:            src.Topic,
		StartedAt:       res.startedAt,
		Duration:        res.duration,
		StatusCode:      res.status,
		Outcome:         p.outcome,
		ErrorClass:      p.errorClass,
		ResponseExcerpt: res.excerpt,
		NextAction:      p.action,
		ReplayID:        dl.ReplayID,
	}
	if res.err != nil {
		rec.Error = truncate(res.err.Error(), 512)
	}
	if res.destination != "" {
		rec.Destination, rec.BodySHA256 = res.destination, bodyDigest(dl.Body)
	}
	switch p.action {
	case attempt.NextRetry:
		next := p.next.Record(d.names.Retry[p.tier])
		next.Partition = src.Partition
		if _, err := d.produce(ctx, next); err != nil {
			return d.produceFailed("retry record", src, err)
		}
		rec.NextDueAt = p.due
	case attempt.NextDeadLetter:
		prov := deadletter.Provenance{
			OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
			Attempts: dl.Attempt - 1, FirstAttempt: dl.FirstAttempt, LastStatus: dl.LastStatus,
			ErrorClass: p.errorClass, Reason: p.reason, DeadAt: now,
		}
		if res.attempted {
			prov.Attempts, prov.FirstAttempt, prov.LastAttempt = dl.Attempt, p.next.FirstAttempt, res.startedAt
			prov.LastStatus = res.status
		}
		dead := deadletter.Record(d.names.DLQ, src, prov)
		r, err := d.produce(ctx, dead)
		if err != nil {
			return d.produceFailed("dead letter", src, err)
		}
		rec.DLQ = &attempt.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
		rec.DeadReason = p.reason
		d.m.deadLetters.WithLabelValues(p.reason).Inc()
	}
	key := attemptKey{p.outcome, dl.Attempt}
	kr, err := rec.KafkaRecord(d.names.Attempts)
	if err != nil {
		d.log.Error("invalid attempt record, not produced", "delivery_id", dl.ID, "error", err)
		d.m.attemptsBy.get(key).Inc()
		d.complete(it, true)
		return true
	}
	d.produceAttempt(ctx, it, kr, key)
	return true
}

// produceAttempt produces it's attempt record and completes it once the
// broker acknowledged it, from kgo's promise: no goroutine waits for the
// acknowledgement. A failed produce is retried as d.produce retries, on a
// goroutine of its own.
func (d *Dispatcher) produceAttempt(ctx context.Context, it *item, kr *kgo.Record, key attemptKey) {
	w := attemptPool.Get().(*attemptWaiter)
	w.d, w.ctx, w.it, w.key, w.tick = d, ctx, it, key, d.slowProduces.start()
	d.cl.Produce(ctx, kr, w.promise) // kgo calls the promise exactly once
}

// attemptWaiter carries an attempt record's produce to its promise; it
// and its promise are pooled.
type attemptWaiter struct {
	d       *Dispatcher
	ctx     context.Context
	it      *item
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
		if _, err := d.retryProduce(ctx, r, err); err != nil {
			d.complete(it, d.produceFailed("attempt record", it.rec, err))
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

package dispatcher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/retrytiers"
)

// requester runs the requests the core starts, one at a time, until jobs
// is closed. Concurrency of them run for the dispatcher's life: a request
// runs on a stack its predecessors grew through the HTTP client instead
// of a new goroutine growing its own (BenchmarkDispatcher: stack copying
// 4.9% of the CPU with a goroutine per request, 1.5% with these). The
// loop never waits on jobs: at most Concurrency requests are started and
// not ended, and jobs holds as many.
//
// Each requester also keeps requesterStack bytes of its stack in use,
// for net/http's HTTP/2 client: it writes every request from a goroutine
// of its own, which the runtime starts with the average stack in use at
// the last GC (adaptivestackstart). Left alone that average is about
// 3 KiB here, so every such goroutine started with 4 KiB and copied its
// whole stack once TLS encryption went deeper (runtime.newstack: 8% of the
// CPU of BenchmarkDispatcher/https-h2). The requesters' reserve lifts the
// average so that those goroutines start with 8 KiB, which is enough.
// franz-go's growStack (kgo) and CockroachDB's growstack pre-grow their
// own goroutines for the same reason; this goroutine is net/http's, so
// only its starting size can be moved. docs/benchmarks.md has the figures.
func (d *Dispatcher) requester() {
	var reserve [requesterStack]byte
	holdStack(&reserve)
	for it := range d.jobs {
		d.request(it)
	}
}

// requesterStack is what each requester keeps of its stack in use: with
// the 256 requesters of the default Concurrency it brings the dispatcher's
// average stack in use over 4 KiB (the runtime then starts goroutines with
// 8 KiB); 8 KiB overshoots to 16 KiB starts.
const requesterStack = 4 << 10

// holdStack keeps *b on the caller's frame (a pointer that does not
// escape, to a function the compiler cannot see through).
//
//go:noinline
func holdStack(b *[requesterStack]byte) { b[0] = 1 }

// request makes it's attempt, hands the loop its end (its slots are
// free) and finishes the record (finish.go), which hands the loop its
// completion. A finish that waits for a produce (a retry record or dead
// letter, acknowledged before the attempt record) runs on a goroutine of
// its own, so the requester is free for the next request.
func (d *Dispatcher) request(it *sched.Item) {
	r := recordOf(it)
	res := d.attempt(it, r)
	d.events <- event{it: it, ok: res.status > 0}
	if res.attempted && !res.aborted && res.verdict.Outcome == attempt.OutcomeDelivered {
		d.finish(it, res) // produces its attempt record without waiting
		return
	}
	go d.finish(it, res)
}

// attempt makes one HTTP attempt of r (it's record), through its
// endpoint's breaker.
func (d *Dispatcher) attempt(it *sched.Item, r *record) result {
	dl := r.d
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
	// For its intent and its attempt record (one hash for both):
	res.destination, res.bodySHA256, res.attemptID = t.URL, bodyDigest(dl.Body), newAttemptID()
	r.started = true
	d.inflight.add(sched.Partition{Topic: r.rec.Topic, Partition: r.rec.Partition})
	if err := d.intend(r, res); err != nil {
		// Cut by shutdown (or a permanent error): nothing was sent, the
		// record stays unfinished.
		d.breakers.done(ticket, BreakerIgnore)
		res.attempted, res.aborted = false, true
		return res
	}
	first := dl.Attempt == 1 && r.rec.Topic == d.names.Deliveries
	if first {
		observeSince(d.m.stageWait, r.rec.Timestamp, start)
		observeSince(d.m.stageIntent, start, time.Now())
	}
	d.events <- event{it: it, sent: true} // the wait for Kafka is not the endpoint's
	ctx, span := d.startSpan(r, t)
	resp := d.sender.send(ctx, t, dl, d.timeout(t))
	res.duration = time.Since(start)
	if first {
		d.m.stageHTTP.Observe(res.duration.Seconds())
	}
	res.status, res.excerpt, res.err = resp.status, resp.excerpt, resp.err
	res.verdict = classifyResponse(resp, dl.ClientErrors)
	d.breakers.done(ticket, res.verdict.Breaker)
	if res.verdict.ErrorClass == ClassSSRF {
		d.refusals.warn(d.log, t, resp.err)
	}
	d.m.latencyBy.get(res.verdict.Outcome).Observe(res.duration.Seconds())
	if span != nil {
		res.traceparent = endSpan(span, &res)
	}
	if res.err != nil && d.workCtx.Err() != nil {
		// Aborted by shutdown, not the endpoint's doing: leave the record
		// unfinished so it is attempted again after the restart.
		res.aborted = true
	}
	return res
}

// classifyResponse is Classify of resp, with its Retry-After header.
func classifyResponse(resp response, clientErrors int) Verdict {
	var ra time.Duration
	if resp.retryAfter != "" {
		ra, _ = retrytiers.ParseRetryAfter(resp.retryAfter, time.Now())
	}
	return Classify(resp.status, resp.err, ra, clientErrors)
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

// skipClass returns why a record must not be sent to its endpoint (t, ok
// from the index), or "" when it may be: the endpoint is deleted or
// disabled, or the record's account (the hookd-account header) is not the
// endpoint's account. The core checks it when it routes the record; the
// request checks it again, for the endpoint may have changed meanwhile.
func skipClass(t Target, ok bool, dl *delivery.Delivery) string {
	switch {
	case !ok:
		return ClassDeleted
	case dl.Account != t.Account:
		return ClassAccountMismatch
	case t.Disabled:
		return ClassDisabled
	}
	return ""
}

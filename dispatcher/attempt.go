package dispatcher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/retrytiers"
)

// request is the goroutine of one request the core started: the attempt,
// then its end handed to the loop (the slots are free), then the
// record's finish (finish.go), which hands the loop its completion.
func (d *Dispatcher) request(it *sched.Item) {
	r := recordOf(it)
	res := d.attempt(r)
	d.events <- event{it: it, ok: res.status > 0}
	d.finish(it, res)
}

// attempt makes one HTTP attempt of r, through its endpoint's breaker.
func (d *Dispatcher) attempt(r *record) result {
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
	res.destination = t.URL // a request is made: the evidence names where it went
	first := dl.Attempt == 1 && r.rec.Topic == d.names.Deliveries
	if first {
		observeSince(d.m.stageWait, r.rec.Timestamp, start)
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

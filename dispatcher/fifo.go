package dispatcher

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/attempt"
)

// Ordered (FIFO) endpoints: the core (internal/sched) starts one of an
// endpoint's records at a time, in partition order. Here, the edges: a
// failed attempt of one is not produced to a retry tier but handed back
// to the core (Retry) with its schedule's due time, and a delivered one
// lets the endpoint go on (Release) before its attempt record is
// acknowledged. A record out of attempts is dead-lettered, acknowledged,
// and only then finished: the next record starts after its dead letter.

// RetryInPlaceHeader marks the attempt record of a FIFO endpoint's failed
// attempt, retried in place: no retry record was produced, so its source
// record is not answered. A resume (resume.go) does not skip that record:
// it is sent again (its schedule starting over) by the partition's next
// owner.
const RetryInPlaceHeader = "hookd-retry-in-place"

var retryInPlaceHeaders = []kgo.RecordHeader{{Key: RetryInPlaceHeader}}

// isRetryInPlace reports whether kr carries RetryInPlaceHeader.
func isRetryInPlace(kr *kgo.Record) bool {
	for _, h := range kr.Headers {
		if h.Key == RetryInPlaceHeader {
			return true
		}
	}
	return false
}

// retryInPlace produces it's attempt record (plan p: a retry at p.due;
// with the attempt span's traceparent, as finishRecord's), acknowledged,
// then hands it back to the core to be attempted again at p.due with the
// next attempt's state. It returns false, the record left
// unfinished, when the produce was cut by shutdown.
func (d *Dispatcher) retryInPlace(it *sched.Item, r *record, rec attempt.Record, p plan, traceparent string) bool {
	rec.NextDueAt = p.due
	key := attemptKey{p.outcome, r.d.Attempt}
	kr, err := rec.KafkaRecord(d.names.Attempts)
	if err != nil {
		d.log.Error("invalid attempt record, not produced", "delivery_id", r.d.ID, "error", err)
	} else {
		kr.Partition = r.rec.Partition // next to its intent, where a resume reads
		kr.Headers = append(kr.Headers, retryInPlaceHeaders...)
		withTraceparent(kr, traceparent)
		if _, err := d.produce(d.workCtx, kr); err != nil {
			return d.produceFailed("attempt record", r.rec, err)
		}
	}
	d.m.attemptsBy.get(key).Inc()
	next := p.next
	r.d = &next // read by the next attempt, which the loop starts after this event
	d.events <- event{it: it, retry: true, due: p.due}
	d.wg.Done() // not running while it waits; its next Start counts it again
	return true
}

package dispatcher

import (
	"context"
	"sync"

	"github.com/hookd/hookd/internal/attempt"
)

// Intent records (resume.go has what they are for). One goroutine,
// writeIntents, produces them: the intents of the requests started while
// one intent record is being produced go into the next record, so a
// request waits for two produces at most and, under load, one record
// carries many intents. The per-record cost of producing it, storing it
// and reading it back is paid once per batch instead of once per request.

// maxIntentBatch bounds the intents in one record: about 250 bytes each,
// 64 KiB a record, far below the broker's default limit of 1 MiB.
const maxIntentBatch = 256

// intentReq is one request's intent, waiting for its record's
// acknowledgement. Pooled with its channel.
type intentReq struct {
	in   attempt.Intent
	done chan error // the record's produce: nil once acknowledged
}

var intentReqs = sync.Pool{New: func() any { return &intentReq{done: make(chan error, 1)} }}

// intend produces the intent record of the request res is about to make
// and returns once the broker acknowledged it (retrying as produce does):
// no request goes on the wire without a trace in Kafka. The intent names
// the request (attempt id, r's position, start, destination); the
// dispatcher that resumes the partition after a crash makes its attempt
// record of outcome unknown from r, read again, if no attempt record with
// its attempt id followed (resume.go).
func (d *Dispatcher) intend(r *record, res result) error {
	q := intentReqs.Get().(*intentReq)
	q.in = attempt.Intent{AttemptID: res.attemptID, Attempt: r.d.Attempt, StartedAt: res.startedAt,
		Destination: res.destination,
		Source:      attempt.Position{Topic: r.rec.Topic, Partition: r.rec.Partition, Offset: r.rec.Offset}}
	if err := q.in.Validate(); err != nil {
		intentReqs.Put(q)
		return err
	}
	select {
	case d.intentQ <- q:
	case <-d.intentsDone:
		return context.Canceled
	}
	var err error
	select {
	case err = <-q.done:
	case <-d.intentsDone:
		select {
		case err = <-q.done: // taken before the writer stopped: answered
		default:
			return context.Canceled // left in the queue: q is not reused
		}
	}
	q.in = attempt.Intent{}
	intentReqs.Put(q)
	return err
}

// writeIntents produces the intents of intentQ, as many as are waiting
// (maxIntentBatch at most) in each record, until workCtx ends. Every
// intent it takes is answered.
func (d *Dispatcher) writeIntents() {
	defer close(d.intentsDone)
	batch := make([]*intentReq, 0, maxIntentBatch)
	ins := make([]*attempt.Intent, 0, maxIntentBatch)
	for {
		select {
		case q := <-d.intentQ:
			batch = append(batch[:0], q)
		case <-d.workCtx.Done():
			return
		}
	gather:
		for len(batch) < maxIntentBatch {
			select {
			case q := <-d.intentQ:
				batch = append(batch, q)
			default:
				break gather
			}
		}
		ins = ins[:0]
		for _, q := range batch {
			ins = append(ins, &q.in)
		}
		err := d.produceIntents(ins)
		clear(ins)
		for _, q := range batch {
			q.done <- err
		}
		clear(batch)
	}
}

// produceIntents produces ins as one intent record and returns once the
// broker acknowledged it (nil), or with produce's error.
func (d *Dispatcher) produceIntents(ins []*attempt.Intent) error {
	kr, err := attempt.IntentBatch(d.names.Intents, ins)
	if err != nil {
		return err
	}
	kr.Partition = 0
	_, err = d.produceOn(d.workCtx, d.intents, kr)
	if err == nil {
		d.m.intentRecords.Inc()
		d.m.intents.Add(float64(len(ins)))
	}
	return err
}

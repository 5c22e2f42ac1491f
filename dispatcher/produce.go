package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// Produce retry bounds: a failed produce of a retry record, dead letter or
// attempt record is retried after produceBackoff, doubling up to
// produceBackoffMax; a produce unanswered for produceSlow (kgo retries by
// itself while the broker is unreachable) counts as an outage.
var (
	produceBackoff    = 100 * time.Millisecond
	produceBackoffMax = 10 * time.Second
	produceSlow       = 15 * time.Second
)

var errProduceSlow = errors.New("no acknowledgement from Kafka yet")

// produce writes rec and returns it once the broker acknowledged it. A
// failure is retried with backoff until it succeeds, ctx ends (shutdown
// after DrainTimeout: the source record stays unfinished and is re-read
// after the restart) or the error is permanent (Run ends with it). Kafka
// being unreachable costs time, never a record.
func (d *Dispatcher) produce(ctx context.Context, rec *kgo.Record) (*kgo.Record, error) {
	return d.produceOn(ctx, d.cl, rec)
}

// produceOn is produce through cl (the intent client, or d.cl).
func (d *Dispatcher) produceOn(ctx context.Context, cl *kgo.Client, rec *kgo.Record) (*kgo.Record, error) {
	tick := d.slowProduces.start()
	_, err := produceSync(ctx, cl, rec) // kgo acknowledges rec itself
	d.slowProduces.done(tick)
	return d.retryProduce(ctx, cl, rec, err)
}

// retryProduce goes on from a produce of rec through cl that ended with
// err (nil: acknowledged, rec is the acknowledged record) as produce does.
func (d *Dispatcher) retryProduce(ctx context.Context, cl *kgo.Client, rec *kgo.Record, err error) (*kgo.Record, error) {
	backoff := produceBackoff
	for {
		switch {
		case err == nil:
			d.produceOutage.ok(ctx, d.log)
			return rec, nil
		case ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed):
			return nil, err
		case kafkaconn.Permanent(err):
			d.fatal(fmt.Errorf("producing to %s: %w", rec.Topic, err))
			return nil, err
		}
		d.m.produceErrors.Inc() // the last failure, if any, is finish's to count
		d.produceOutage.fail(ctx, d.log, fmt.Errorf("producing to %s: %w", rec.Topic, err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, produceBackoffMax)
		tick := d.slowProduces.start()
		_, err = produceSync(ctx, cl, rec)
		d.slowProduces.done(tick)
	}
}

// produceSync is kgo's ProduceSync for one record without its per-call
// results slice, WaitGroup and promise closure: the waiter, its channel
// and its promise are pooled.
func produceSync(ctx context.Context, cl *kgo.Client, rec *kgo.Record) (*kgo.Record, error) {
	w := producePool.Get().(*produceWaiter)
	cl.Produce(ctx, rec, w.promise) // kgo calls the promise exactly once
	res := <-w.ch
	producePool.Put(w)
	return res.Record, res.Err
}

type produceWaiter struct {
	ch      chan kgo.ProduceResult
	promise func(*kgo.Record, error)
}

var producePool = sync.Pool{New: func() any {
	w := &produceWaiter{ch: make(chan kgo.ProduceResult, 1)}
	w.promise = func(r *kgo.Record, err error) { w.ch <- kgo.ProduceResult{Record: r, Err: err} }
	return w
}}

// outage tracks one kind of Kafka operation through a broker outage: one
// WARN when it starts failing, debug lines for the retries, one INFO when
// it succeeds again.
type outage struct {
	what     string
	failing  atomic.Bool  // fast path of ok, called after every success
	last     atomic.Int64 // Unix nanoseconds of the last failure or recovery, for resumes
	mu       sync.Mutex
	since    time.Time // zero while it succeeds
	failures int
}

// failedWithin reports a failure within d of now, or an outage not over
// yet. An outage lasts until its recovery: a request that hung through a
// broker freeze failed once, at its start, and a resume right after the
// recovery must still count it.
func (o *outage) failedWithin(d time.Duration) bool {
	if o.failing.Load() {
		return true
	}
	last := o.last.Load()
	return last != 0 && time.Since(time.Unix(0, last)) <= d
}

func (o *outage) fail(ctx context.Context, log *slog.Logger, err error) {
	o.last.Store(time.Now().UnixNano())
	o.mu.Lock()
	first := o.since.IsZero()
	if first {
		o.since = time.Now()
		o.failing.Store(true)
	}
	o.failures++
	o.mu.Unlock()
	if first {
		log.WarnContext(ctx, o.what+" failing; retrying until Kafka answers", "error", err)
		return
	}
	log.DebugContext(ctx, o.what+" failed again", "error", err)
}

func (o *outage) ok(ctx context.Context, log *slog.Logger) {
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	if o.since.IsZero() {
		o.mu.Unlock()
		return
	}
	since, n := o.since, o.failures
	o.since, o.failures = time.Time{}, 0
	o.last.Store(time.Now().UnixNano()) // failing until now (failedWithin)
	o.failing.Store(false)
	o.mu.Unlock()
	log.InfoContext(ctx, o.what+" recovered", "after", time.Since(since).Round(time.Millisecond), "failures", n)
}

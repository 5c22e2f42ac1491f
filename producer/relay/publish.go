package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/store"
)

// publisher produces the outbox rows of one replication session: each
// row's envelope to the events topic or, if the row can never be
// published, a summary dead letter to the DLQ. Either way the row's done
// is called once, with nil when Kafka acknowledged what stands for it, so
// the slot moves past it; with an error when the stream must restart.
type publisher struct {
	r    *Relay
	ctx  context.Context // ends once the session has drained
	cl   *kgo.Client     // batching, shared by every row
	solo *kgo.Client     // one record at a time, for retrying a row alone

	// limit is the backlog (records produced but not yet acknowledged) at
	// which the session stops reading the stream: half of cl's
	// MaxBufferedRecords, so that Produce never blocks the session.
	limit int
	// room is signalled whenever a record is settled; lastAck is when
	// Kafka last acknowledged one (unix nanoseconds).
	room    chan struct{}
	lastAck atomic.Int64

	mu      sync.Mutex
	queue   []soloItem
	pending int           // queued or being retried alone
	idle    chan struct{} // closed while pending is 0
	wake    chan struct{}
	done    chan struct{} // closed when the retry worker returns
}

// soloItem is a row Kafka refused in a batch, to be retried alone.
type soloItem struct {
	row       store.OutboxRow
	origin    origin
	rec       *kgo.Record
	published prometheus.Counter
	done      func(error)
}

func (r *Relay) startPublisher(ctx context.Context, cl, solo *kgo.Client) *publisher {
	p := &publisher{r: r, ctx: ctx, cl: cl, solo: solo, limit: bufferLimit(cl), room: make(chan struct{}, 1),
		idle: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	close(p.idle)
	go p.run()
	return p
}

// bufferLimit is half of cl's MaxBufferedRecords, at least 1.
func bufferLimit(cl *kgo.Client) int {
	n := 10000 // kgo's default
	switch v := cl.OptValue(kgo.MaxBufferedRecords).(type) {
	case int:
		n = v
	case int64:
		n = int(v)
	}
	return max(n/2, 1)
}

// settled notes that a record is done with: acknowledged at now, or not
// (now is zero).
func (p *publisher) settled(now time.Time) {
	if !now.IsZero() {
		p.lastAck.Store(now.UnixNano())
		p.r.stall.progress()
	}
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// backlog is the number of records handed to Kafka and not yet settled.
func (p *publisher) backlog() int {
	p.mu.Lock()
	n := p.pending
	p.mu.Unlock()
	return n + int(p.cl.BufferedProduceRecords())
}

// full reports whether the backlog has reached the limit.
func (p *publisher) full() bool { return p.backlog() >= p.limit }

// waitRoom waits while the backlog is at the limit, until ctx ends or, if
// until is not zero, until then.
func (p *publisher) waitRoom(ctx context.Context, until time.Time) error {
	var deadline <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		deadline = t.C
	}
	for p.full() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			return nil
		case <-p.room:
		}
	}
	return nil
}

// wait returns once the retry worker has stopped (after ctx ended).
func (p *publisher) wait() { <-p.done }

// publish produces row. A row is poison when no retry of it could ever
// succeed, and is dead-lettered rather than stopping the stream: a row
// whose envelope cannot be encoded (e.g. nested deeper than encoding/json
// allows) as the router dead-letters the same envelope on the events
// topic (invalid_envelope, with the envelope's reason as error class), an
// envelope over MaxEnvelopeBytes as oversize, both without trying Kafka; a
// record Kafka refuses for what it is (see permanent) is retried alone,
// then dead-lettered as unpublishable. Every other error is transient (it
// concerns Kafka, not the row) and goes to done, which restarts the stream.
// publish itself fails only for an error it cannot classify.
func (p *publisher) publish(row store.OutboxRow, o origin, published prometheus.Counter, done func(error)) error {
	rec, err := p.r.record(row, o)
	if err != nil {
		var ie *event.InvalidError
		if !errors.As(err, &ie) {
			return err
		}
		n := len(row.Payload)
		row.Payload = nil
		p.deadLetter(row, deadletter.ReasonInvalidEnvelope, string(ie.Reason), n, 0, ie.Error(), done)
		return nil
	}
	// A streamed row's payload is the replication message's buffer, which
	// the next message overwrites: what outlives this call must not hold it.
	row.Payload = nil
	if n, limit := len(rec.Value), p.r.cfg.MaxEnvelopeBytes; n > limit {
		p.deadLetter(row, deadletter.ReasonOversize, "oversize", n, limit,
			fmt.Sprintf("envelope is %d bytes, the limit is %d", n, limit), done)
		return nil
	}
	done = p.r.trace(row, rec, done)
	p.cl.Produce(p.ctx, rec, func(rec *kgo.Record, err error) {
		now := ackTime(err)
		defer p.settled(now)
		switch {
		case err == nil:
			p.acked(o, published, now)
			done(nil)
		case permanent(err):
			// It may only have shared a batch with the culprit.
			p.enqueue(soloItem{row: row, origin: o, rec: rec, published: published, done: done})
		default:
			done(err)
		}
	})
	return nil
}

// ackTime is now if err is nil (a record acknowledged), else zero.
func ackTime(err error) time.Time {
	if err != nil {
		return time.Time{}
	}
	return time.Now()
}

// acked counts a published row and observes its commit-to-ack latency
// (as stage.Since does, with the ack's time).
func (p *publisher) acked(o origin, published prometheus.Counter, now time.Time) {
	published.Inc()
	if !o.committed.IsZero() {
		p.r.m.publishLatency.Observe(max(now.Sub(o.committed), 0).Seconds())
	}
}

// permanent reports whether Kafka refused a record for what it is, so that
// producing it again can never succeed: too large, or invalid. Errors that
// concern the topic, the cluster, permissions, clocks or the connection are
// not, whatever their retriability: they would refuse every row alike, so
// they stop the stream and it retries, rather than dead-lettering every
// event.
func permanent(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidRecord)
}

func (p *publisher) enqueue(it soloItem) {
	p.mu.Lock()
	p.queue = append(p.queue, it)
	if p.pending == 0 {
		p.idle = make(chan struct{})
	}
	p.pending++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run retries queued rows alone, one at a time, until ctx ends.
func (p *publisher) run() {
	defer close(p.done)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			if len(p.queue) == 0 {
				p.mu.Unlock()
				break
			}
			it := p.queue[0]
			p.queue = p.queue[1:]
			p.mu.Unlock()
			p.retryAlone(it)
			p.mu.Lock()
			if p.pending--; p.pending == 0 {
				close(p.idle)
			}
			p.mu.Unlock()
			p.settled(time.Time{}) // room: it no longer counts in the backlog
		}
	}
}

func (p *publisher) retryAlone(it soloItem) {
	rec := &kgo.Record{Topic: it.rec.Topic, Key: it.rec.Key, Value: it.rec.Value, Headers: it.rec.Headers}
	err := p.solo.ProduceSync(p.ctx, rec).FirstErr()
	now := ackTime(err)
	defer p.settled(now)
	p.r.logger.DebugContext(p.ctx, "outbox row refused in a batch, retried alone", "outbox_id", short(it.row.ID), "ok", err == nil)
	switch {
	case err == nil:
		p.acked(it.origin, it.published, now)
		it.done(nil)
	case permanent(err):
		class := "produce_error"
		var ke *kerr.Error
		if errors.As(err, &ke) {
			class = ke.Message
		}
		p.deadLetter(it.row, deadletter.ReasonUnpublishable, class, len(rec.Value), 0, err.Error(), it.done)
	default:
		it.done(err)
	}
}

// flush waits until every row handed to publish is done or ctx ends.
func (p *publisher) flush(ctx context.Context) error {
	for {
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		idle, pending := p.idle, p.pending
		p.mu.Unlock()
		if pending == 0 && p.cl.BufferedProduceRecords() == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// deadLetter produces the summary dead letter of row, then calls done.
func (p *publisher) deadLetter(row store.OutboxRow, reason, class string, size, limit int, detail string, done func(error)) {
	rec := deadletter.SummaryRecord(p.r.cfg.DLQTopic, dlqKey(row.Account), deadletter.Summary{
		OutboxID: row.ID, EventID: row.ID, Account: row.Account, EventType: row.Type, Created: row.CreatedAt,
		Size: size, Limit: limit, Detail: detail,
	}, deadletter.Provenance{Reason: reason, ErrorClass: class, DeadAt: time.Now()})
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderSource, Value: []byte("outbox")})
	p.cl.Produce(p.ctx, rec, func(_ *kgo.Record, err error) {
		now := ackTime(err)
		defer p.settled(now)
		if err != nil {
			done(fmt.Errorf("dead-lettering outbox row %s (%s): %w", row.ID, reason, err))
			return
		}
		p.r.m.deadLettered.WithLabelValues(reason).Inc()
		p.r.logger.WarnContext(p.ctx, "outbox row dead-lettered: it can never be published", "outbox_id", short(row.ID),
			"reason", reason, "account", short(row.Account), "event_type", short(row.Type), "size", size, "error", detail, "dlq_topic", p.r.cfg.DLQTopic)
		done(nil)
	})
}

// maxDLQKey bounds a dead letter's key, the row's account: the outbox
// table does not bound an account's length, and a dead letter Kafka
// refused for its size would fail the stream on every retry.
const maxDLQKey = 512

// dlqKey is the key of row's dead letter: its account, clipped.
func dlqKey(account string) []byte {
	if len(account) > maxDLQKey {
		account = account[:maxDLQKey]
	}
	return []byte(account)
}

// short clips a column for a log line (account and type have no length
// limit in the outbox table).
func short(s string) string {
	if len(s) <= 256 {
		return s
	}
	return strings.ToValidUTF8(s[:256], "") + "..."
}

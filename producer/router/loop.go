package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// maxFetchBackoff caps the pause after a poll that returned only errors,
// so that consuming resumes soon after Kafka is back.
const maxFetchBackoff = 5 * time.Second

// errRestart: the transactional producer is in a state no new transaction
// can start from (kgo: "no returned error is retryable"); Run closes the
// session and opens a new one, whose InitProducerID aborts whatever the old
// one left open.
var errRestart = errors.New("transactional session must be restarted")

// loop is one session's consuming state: how each kind of Kafka failure is
// going.
type loop struct {
	r  *Router
	s  *kgo.GroupTransactSession
	cl *kgo.Client
	b  batch

	produce, fetch, commit trouble
	fetchBackoff           time.Duration
	// abortBackoff is the pause before the batch of an aborted
	// transaction is read and fanned out again.
	abortBackoff time.Duration
}

func (r *Router) newLoop(s *kgo.GroupTransactSession) *loop {
	return &loop{r: r, s: s, cl: s.Client(),
		produce: trouble{logger: r.logger, what: "router produce failing; the transaction is aborted and the batch fanned out again", done: "router produce recovered"},
		fetch:   trouble{logger: r.logger, what: "router fetch failing; waiting it out", done: "router fetch recovered"},
		commit: trouble{logger: r.logger, what: "router transaction not committed; the batch is fanned out again",
			done: "router transaction commit recovered"},
	}
}

// fetchErrors waits out the poll's errors: one WARN while they last, a
// pause when the poll brought nothing else. A permanent error ends the
// router.
func (l *loop) fetchErrors(ctx context.Context, fetches kgo.Fetches) error {
	var first error
	var perm error
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if kafkaconn.Permanent(err) && perm == nil {
			perm = fmt.Errorf("consuming %s partition %d: %w", topic, p, err)
		}
		if first == nil {
			first = fmt.Errorf("topic %s partition %d: %w", topic, p, err)
		}
	})
	switch {
	case perm != nil:
		return perm
	case first == nil:
		l.fetch.ok(ctx)
		l.fetchBackoff = 0
		return nil
	}
	l.fetch.fail(ctx, first)
	if len(fetches.Records()) == 0 {
		l.fetchBackoff = min(max(2*l.fetchBackoff, l.r.cfg.RetryBackoff), maxFetchBackoff)
		pause(ctx, l.fetchBackoff)
	}
	return nil
}

// gather polls more records into recs until it holds MaxPollRecords or
// the time until has come (Config.TransactionInterval after the previous
// transaction's start). kgo fetches again only once
// its buffered fetch is polled, so the records are gathered by polling, not
// by pausing before the poll: a pause would add a fetch's round trip after
// it. An empty recs is returned as it is: the poll returned for an error,
// and there is nothing to hold back. Nor is anything gathered once ctx has
// ended: a poll then returns at once (fetchErrors ignores its error), so
// the loop would spin until until.
func (l *loop) gather(ctx context.Context, recs []*kgo.Record, until time.Time) ([]*kgo.Record, error) {
	for len(recs) > 0 && len(recs) < l.r.cfg.MaxPollRecords && ctx.Err() == nil {
		wait := time.Until(until)
		if wait <= 0 {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fetches := l.s.PollRecords(pctx, l.r.cfg.MaxPollRecords-len(recs))
		cancel()
		if fetches.IsClientClosed() {
			break
		}
		if err := l.fetchErrors(ctx, fetches); err != nil {
			return recs, err
		}
		recs = append(recs, fetches.Records()...)
	}
	return recs, nil
}

// route fans out recs in one transaction that also commits their offsets
// and their dedupe changelog records: all of it is visible to read_committed
// readers, or none. A transaction that does not commit (a failed produce, a
// rebalance, a failed offset commit) is aborted and rewinds the session to
// the committed offsets, so the next poll reads the batch again: the
// router's retry is "abort and fan out again", which never writes a
// delivery twice. It returns an error only for a permanent failure, when
// the session must be restarted (errRestart), or when the batch is
// abandoned at shutdown.
func (l *loop) route(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	// The batch in hand is finished even if ctx ends meanwhile, for up to
	// DrainTimeout after it does. And within TransactionTimeout however
	// long ctx lives: past it Kafka aborts the transaction anyway, and
	// ending it can wait forever on a group that cannot rejoin while this
	// batch holds the rebalance (a broker frozen for a minute expired the
	// member; End's heartbeat then never came). The session is restarted
	// instead, and its InitProducerID aborts what is left.
	work, cancel := workContext(ctx, l.r.cfg.DrainTimeout)
	defer cancel()
	work, cancelBatch := context.WithTimeout(work, l.r.cfg.TransactionTimeout)
	defer cancelBatch()
	start := time.Now()
	if err := l.s.Begin(); err != nil {
		if kafkaconn.Permanent(err) { // e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED
			return fmt.Errorf("beginning a transaction as %s: %w", l.r.cfg.TransactionalID, err)
		}
		return fmt.Errorf("beginning a transaction: %w: %w", err, errRestart)
	}
	res, err := l.r.handle(work, l, recs)
	committed := false
	defer func() { endSpans(&l.b, committed) }()
	if err == nil {
		err = res.produceErr
	}
	if err != nil {
		return l.batchFailed(ctx, work, err)
	}
	committed, err = l.s.End(work, kgo.TryCommit)
	switch {
	case err != nil && kafkaconn.Permanent(err):
		return fmt.Errorf("committing the transaction of group %s: %w", l.r.cfg.Group, err)
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("committing the transaction: %w", err)
	case err != nil:
		l.commit.fail(ctx, err)
		return fmt.Errorf("committing the transaction: %w: %w", err, errRestart)
	case !committed:
		// A rebalance since Begin, or an offset commit the group refused
		// for now: the batch is read again, by whoever owns it.
		l.commit.fail(ctx, errors.New("aborted: the group rebalanced or refused the offsets"))
		l.r.m.aborts.Inc()
		return nil
	}
	l.commit.ok(ctx)
	l.abortBackoff = 0
	l.r.committed(res)
	l.r.m.batch.Observe(time.Since(start).Seconds())
	return nil
}

// batchFailed aborts the transaction of a batch Kafka did not take (or
// whose partitions' dedupe state could not be read back), and pauses
// (doubling up to 30s) before it is read and fanned out again.
func (l *loop) batchFailed(ctx, work context.Context, err error) error {
	if kafkaconn.Permanent(err) || errors.Is(err, errChangelogPartitions) {
		l.abort(work)
		return err
	}
	l.r.m.retries.WithLabelValues("kafka").Inc()
	l.produce.fail(ctx, err)
	if !l.abort(work) {
		return fmt.Errorf("aborting the transaction: %w", errRestart)
	}
	l.abortBackoff = min(max(2*l.abortBackoff, l.r.cfg.RetryBackoff), 30*time.Second)
	pause(ctx, l.abortBackoff)
	return nil
}

// abort aborts the transaction in flight; false if that failed (then only
// a new session, or the transaction timeout, ends it).
func (l *loop) abort(ctx context.Context) bool {
	l.r.m.aborts.Inc()
	if _, err := l.s.End(ctx, kgo.TryAbort); err != nil {
		l.r.logger.WarnContext(ctx, "router could not abort its transaction; a new session will", "error", err.Error())
		return false
	}
	return true
}

// trouble logs one WARN when a kind of failure starts and one INFO when it
// ends, however many retries lie between: one line per outage, not per
// retry. It is used from Run's goroutine only.
type trouble struct {
	logger     *slog.Logger
	what, done string
	since      time.Time
	retries    int
}

func (t *trouble) fail(ctx context.Context, err error) {
	t.retries++
	if t.since.IsZero() {
		t.since = time.Now()
		t.logger.WarnContext(ctx, t.what, "error", err.Error())
	}
}

func (t *trouble) ok(ctx context.Context) {
	if t.since.IsZero() {
		return
	}
	t.logger.InfoContext(ctx, t.done, "after", time.Since(t.since).Round(time.Millisecond).String(), "retries", t.retries)
	t.since, t.retries = time.Time{}, 0
}

// workContext returns a context for work that must outlive ctx: it keeps
// ctx's values and ends drain after ctx does (or when cancel is called),
// never while ctx is live, however long Kafka takes.
func workContext(ctx context.Context, drain time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(fmt.Errorf("drain timeout (%s) passed: %w", drain, context.DeadlineExceeded))
		case <-work.Done():
		}
	})
	return work, func() {
		stop()
		cancel(context.Canceled)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

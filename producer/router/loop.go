package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// maxFetchBackoff caps the pause after a poll that returned only errors,
// so that consuming resumes soon after Kafka is back.
const maxFetchBackoff = 5 * time.Second

// loop is one Run's consuming state: how each kind of Kafka failure is
// going, and whether the last offset commit is still owed.
type loop struct {
	r  *Router
	cl *kgo.Client
	b  batch

	produce, fetch, commit trouble
	commitOwed             bool
	fetchBackoff           time.Duration

	// commitCtx outlives Run's context by DrainTimeout, so that the last
	// commit finishes at shutdown; stopCommits ends it.
	commitCtx   context.Context
	stopCommits context.CancelFunc
	// commitDone is closed once the offset commit in flight has finished,
	// with commitErr its result; nil while none is in flight.
	commitDone chan struct{}
	commitErr  error
}

func (r *Router) newLoop(ctx context.Context, cl *kgo.Client) *loop {
	commitCtx, stop := workContext(ctx, r.cfg.DrainTimeout)
	return &loop{r: r, cl: cl, commitCtx: commitCtx, stopCommits: stop,
		produce: trouble{logger: r.logger, what: "router produce failing; retrying until Kafka takes the batch", done: "router produce recovered"},
		fetch:   trouble{logger: r.logger, what: "router fetch failing; waiting it out", done: "router fetch recovered"},
		commit: trouble{logger: r.logger, what: "router offset commit failing; retrying (the records may be read again)",
			done: "router offset commit recovered"},
	}
}

// poll returns the next records. While a commit is owed or in flight it
// returns after RetryBackoff even with none, so that an idle router learns
// how its last commit went and retries it if it failed.
func (l *loop) poll(ctx context.Context) kgo.Fetches {
	if !l.commitOwed && l.commitDone == nil {
		return l.cl.PollRecords(ctx, l.r.cfg.MaxPollRecords)
	}
	pctx, cancel := context.WithTimeout(ctx, l.r.cfg.RetryBackoff)
	defer cancel()
	return l.cl.PollRecords(pctx, l.r.cfg.MaxPollRecords)
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

// route fans out recs and starts committing their offsets, or commits
// what is owed when there are none. It returns an error only for a
// permanent failure or when the batch is abandoned at shutdown.
//
// The commit is not waited for: the next batch is polled and fanned out
// while it is in flight. Its result is taken at the next batch (or, when
// idle, after RetryBackoff); a batch finished while a commit is in flight
// leaves its offsets owed to the next commit. Offsets are still committed
// only once every record before them is acknowledged, and a revocation
// commits what is owed before the partitions change hands (revoked).
func (l *loop) route(ctx context.Context, recs []*kgo.Record) error {
	if err := l.settleCommit(ctx, false); err != nil {
		return err
	}
	if len(recs) == 0 {
		if l.commitOwed && l.commitDone == nil {
			return l.commitOffsets(ctx)
		}
		return nil
	}
	// The batch in hand is finished even if ctx ends meanwhile, for up to
	// DrainTimeout after it does.
	work, cancel := workContext(ctx, l.r.cfg.DrainTimeout)
	defer cancel()
	start := time.Now()
	defer func() { l.r.m.batch.Observe(time.Since(start).Seconds()) }()
	if err := l.r.handle(work, l, recs); err != nil {
		return err
	}
	l.r.acked.Store(true)
	return l.commitAsync(ctx)
}

// commitOffsets commits what was consumed and waits for the result. A
// failed commit is owed and retried (the next commit carries it anyway):
// if the router stops or loses the partitions first, the records are read
// again, duplicates rather than loss.
func (l *loop) commitOffsets(ctx context.Context) error {
	l.commitOwed = false
	return l.commitResult(ctx, l.cl.CommitUncommittedOffsets(ctx))
}

// commitAsync starts committing what was consumed, unless a commit is in
// flight: then the offsets are owed to the next one, which carries them.
func (l *loop) commitAsync(ctx context.Context) error {
	if err := l.settleCommit(ctx, false); err != nil {
		return err
	}
	if l.commitDone != nil {
		l.commitOwed = true
		return nil
	}
	l.commitOwed = false
	offsets := l.cl.UncommittedOffsets()
	if len(offsets) == 0 {
		return nil
	}
	done := make(chan struct{})
	l.commitDone = done
	l.cl.CommitOffsets(l.commitCtx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		l.commitErr = commitError(resp, err) // read after done is closed
		close(done)
	})
	return nil
}

// settleCommit takes the result of the commit in flight, if it has
// finished or (wait) once it has; commitCtx bounds the wait at shutdown.
func (l *loop) settleCommit(ctx context.Context, wait bool) error {
	if l.commitDone == nil {
		return nil
	}
	if wait {
		<-l.commitDone
	} else {
		select {
		case <-l.commitDone:
		default:
			return nil
		}
	}
	err := l.commitErr
	l.commitDone, l.commitErr = nil, nil
	return l.commitResult(ctx, err)
}

// commitResult records how a commit went: a permanent error is returned,
// any other makes the commit owed. Success leaves owed what was consumed
// after the commit started.
func (l *loop) commitResult(ctx context.Context, err error) error {
	switch {
	case err == nil:
		l.commit.ok(ctx)
		return nil
	case kafkaconn.Permanent(err):
		return fmt.Errorf("committing offsets of group %s: %w", l.r.cfg.Group, err)
	}
	l.commitOwed = true
	l.commit.fail(ctx, err)
	return nil
}

// commitError is a commit's error: the request's, else the first
// partition's.
func commitError(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil || resp == nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

// close waits for the commit in flight and commits what is still owed,
// within DrainTimeout of Run's context ending. It commits only if every
// polled record is acknowledged: after a batch was abandoned or failed,
// the uncommitted offsets cover records never written, which must be read
// again.
func (l *loop) close(ctx context.Context) {
	defer l.stopCommits()
	err := l.settleCommit(ctx, true)
	if err == nil && l.commitOwed && l.r.acked.Load() {
		err = l.commitOffsets(l.commitCtx)
	}
	if err != nil {
		l.r.logger.WarnContext(ctx, "router's last offset commit failed; the records will be read again", "error", err.Error())
	}
}

// revoked commits, before partitions change hands, the offsets of the
// batches fanned out, if every polled record is acknowledged (a rebalance
// waits for AllowRebalance, which follows a batch's acks; not so when the
// client closes after a batch was abandoned or failed: those records must
// be read again). It runs on kgo's goroutine, so it touches no loop state:
// a commit the loop still owes is then an empty one. A failed commit means
// the new owner reads those records again (duplicates, not loss).
func (r *Router) revoked(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
	if !r.acked.Load() {
		return
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		r.logger.WarnContext(ctx, "router offset commit at revocation failed; the records will be read again", "error", err.Error())
	}
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

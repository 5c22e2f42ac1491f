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

// loop is one Run's consuming state: how each kind of Kafka failure is
// going, and whether the last offset commit is still owed.
type loop struct {
	r  *Router
	cl *kgo.Client
	b  batch

	produce, fetch, commit trouble
	commitOwed             bool
	fetchBackoff           time.Duration
}

func (r *Router) newLoop(cl *kgo.Client) *loop {
	return &loop{r: r, cl: cl,
		produce: trouble{logger: r.logger, what: "router produce failing; retrying until Kafka takes the batch", done: "router produce recovered"},
		fetch:   trouble{logger: r.logger, what: "router fetch failing; waiting it out", done: "router fetch recovered"},
		commit: trouble{logger: r.logger, what: "router offset commit failing; retrying (the records may be read again)",
			done: "router offset commit recovered"},
	}
}

// poll returns the next records. While a commit is owed it returns after
// RetryBackoff even with none, so that an idle router commits too.
func (l *loop) poll(ctx context.Context) kgo.Fetches {
	if !l.commitOwed {
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

// route fans out recs and commits, or commits what is owed when there are
// none. It returns an error only for a permanent failure or when the
// batch is abandoned at shutdown.
func (l *loop) route(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 0 {
		if l.commitOwed {
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
	return l.commitOffsets(work)
}

// commitOffsets commits what was consumed. A failed commit is owed and
// retried (the next commit carries it anyway): if the router stops or
// loses the partitions first, the records are read again, duplicates
// rather than loss.
func (l *loop) commitOffsets(ctx context.Context) error {
	err := l.cl.CommitUncommittedOffsets(ctx)
	switch {
	case err == nil:
		l.commitOwed = false
		l.commit.ok(ctx)
		return nil
	case kafkaconn.Permanent(err):
		return fmt.Errorf("committing offsets of group %s: %w", l.r.cfg.Group, err)
	}
	l.commitOwed = true
	l.commit.fail(ctx, err)
	return nil
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

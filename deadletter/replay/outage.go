package replay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// unavailableError is a Kafka request of a run that failed for a reason
// waiting can fix (kafkaconn.Permanent names those it cannot): the broker
// is unreachable, restarting or electing a leader, a request timed out, or
// kgo's retries of a request ran out. A run waits it out (retrying).
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// kafkaErr marks err, from a Kafka request, as unavailableError unless
// waiting cannot fix it: a permanent Kafka error, the run's context
// ending, the client closed.
func kafkaErr(err error) error {
	if err == nil || kafkaconn.Permanent(err) || errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return err
	}
	return &unavailableError{err: err}
}

// Waiting out an outage: a failed step is retried after retryBackoff(n)
// for its nth failure, and a produce not acknowledged within produceStall
// is reported as an outage (kgo retries a produce until it is).
const (
	minRetryBackoff = 250 * time.Millisecond
	maxRetryBackoff = 5 * time.Second
	produceStall    = 10 * time.Second
)

func retryBackoff(n int) time.Duration {
	d := minRetryBackoff
	for i := 1; i < n && d < maxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxRetryBackoff)
}

// retrying runs step until it succeeds, fails for good or ctx ends. A
// Kafka outage (unavailableError) is waited out: step runs again after a
// backoff, from the progress saved (nothing of a step is saved before the
// broker acknowledged it, so running it again neither skips nor repeats).
func (r *runner) retrying(ctx context.Context, step func() error) error {
	for n := 1; ; n++ {
		err := step()
		var down *unavailableError
		if err == nil || ctx.Err() != nil || !errors.As(err, &down) {
			return err
		}
		r.outage.begin(ctx, err)
		t := time.NewTimer(retryBackoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// outage reports a Kafka outage a run waits out: one WARN line when it
// begins, one INFO line with its length when Kafka answers again, not a
// line per retry. Safe for concurrent use (a stalled produce reports from
// a timer).
type outage struct {
	log *slog.Logger
	id  string
	mu  sync.Mutex
	// since is when the outage began; zero while Kafka answers.
	since time.Time
}

func (o *outage) begin(ctx context.Context, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.since.IsZero() {
		return
	}
	o.since = time.Now()
	o.log.WarnContext(ctx, "replay waits for Kafka, which is unreachable or failing: it continues when Kafka answers (interrupting it keeps its progress)",
		"replay_id", o.id, "err", err)
}

func (o *outage) end(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.log.InfoContext(ctx, "Kafka answers again: replay continues", "replay_id", o.id,
		"outage", time.Since(o.since).Round(time.Millisecond))
	o.since = time.Time{}
}

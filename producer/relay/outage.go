package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// outage reports a stretch of time in which the relay cannot make
// progress (Kafka unreachable or refusing, the stream failing) once: one
// WARN when it begins, DEBUG for each further failure, one INFO when it
// ends, and the hookd_relay_stalled gauge in between.
type outage struct {
	logger *slog.Logger
	gauge  prometheus.Gauge

	active   atomic.Bool // since is set; read without the lock by end
	mu       sync.Mutex
	since    time.Time // zero when there is no outage
	failures int
}

// begin records a failure; the first of an outage is logged as a WARN.
func (o *outage) begin(ctx context.Context, msg string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	if !o.since.IsZero() {
		o.logger.DebugContext(ctx, msg, append(args, "failures", o.failures, "outage_for", time.Since(o.since).Round(time.Millisecond).String())...)
		return
	}
	o.since = time.Now()
	o.active.Store(true)
	o.gauge.Set(1)
	o.logger.WarnContext(ctx, msg+" (the relay waits it out and says when it is over; nothing is lost)", args...)
}

// end closes the outage, if there is one.
func (o *outage) end(ctx context.Context, msg string) {
	if !o.active.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.logger.InfoContext(ctx, msg, "outage_for", time.Since(o.since).Round(time.Millisecond).String(), "failures", o.failures)
	o.since, o.failures = time.Time{}, 0
	o.active.Store(false)
	o.gauge.Set(0)
}

// stallClock tells Ready whether the relay is stalled: rows wait (the
// stream failed and has not caught up since, or Kafka has not acknowledged
// records for StallAfter) and nothing has moved for longer than
// StallTimeout. Progress is any acknowledged record (published or
// dead-lettered), the confirmed position moving, or the slot found with
// nothing left to stream. A failure does not reset it: a row that failed
// the stream over and over stalls it however often the stream restarts.
type stallClock struct {
	since  atomic.Int64 // unix nanoseconds rows have waited without progress since; 0: none wait
	mu     sync.Mutex
	reason string
}

// waiting records that rows wait, since at at the latest, and why.
func (c *stallClock) waiting(at time.Time, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since.CompareAndSwap(0, at.UnixNano())
	c.reason = reason
}

// progress records that the relay moved. Called for every acknowledged
// record: a load when nothing waits.
func (c *stallClock) progress() {
	if c.since.Load() != 0 {
		c.since.Store(0)
	}
}

// stalled returns why the relay is stalled at now, or nil.
func (c *stallClock) stalled(now time.Time, after time.Duration) error {
	since := c.since.Load()
	if since == 0 {
		return nil
	}
	d := now.Sub(time.Unix(0, since))
	if d <= after {
		return nil
	}
	c.mu.Lock()
	reason := c.reason
	c.mu.Unlock()
	return fmt.Errorf("stalled: no progress for %s while rows wait (the limit is %s): %s", d.Round(time.Second), after, reason)
}

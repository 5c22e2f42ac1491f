package relay

import (
	"context"
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

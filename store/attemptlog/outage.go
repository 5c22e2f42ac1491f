package attemptlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/clock"
)

// kafkaHealth turns the Kafka errors the writer sees (fetch and group
// errors from a poll, failed offset commits) into one WARN when an outage
// starts and one INFO when it ends, however many retries it lasts; the
// errors in between log at DEBUG. An outage ends at the first sign of a
// working broker: a poll that returned records and no error, or a commit
// that succeeded. It is safe for concurrent use: kgo reports autocommits
// from its own goroutine.
type kafkaHealth struct {
	logger *slog.Logger
	clock  clock.Clock
	up     prometheus.Gauge

	mu    sync.Mutex
	down  bool
	since time.Time
	errs  int
}

func newKafkaHealth(logger *slog.Logger, clk clock.Clock, up prometheus.Gauge) *kafkaHealth {
	up.Set(1)
	return &kafkaHealth{logger: logger, clock: clk, up: up}
}

// failed records one Kafka error; what names the operation that failed.
func (k *kafkaHealth) failed(ctx context.Context, what string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.down {
		k.errs++
		k.logger.DebugContext(ctx, "kafka still failing", "during", what, "error", err)
		return
	}
	k.down, k.since, k.errs = true, k.clock.Now(), 1
	k.up.Set(0)
	k.logger.WarnContext(ctx, "kafka is failing; the attempt log waits it out (records stay in Kafka and nothing is skipped); one line per outage",
		"during", what, "error", err)
}

// ok records a sign of a working broker, ending the outage if there is one.
func (k *kafkaHealth) ok(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.down {
		return
	}
	k.down = false
	k.up.Set(1)
	k.logger.InfoContext(ctx, "kafka is working again", "outage", k.clock.Now().Sub(k.since), "errors", k.errs)
}

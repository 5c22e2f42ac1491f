package attemptlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/clock"
)

// kafkaHealth turns the Kafka errors the writer sees (fetch and group
// errors from a poll, failed offset commits) into one WARN when an outage
// starts and one INFO when it ends, however many retries it lasts; the
// errors in between log at DEBUG. An outage ends at the first sign of a
// working broker: a poll that returned records and no error, or a commit
// that succeeded while fetches have been quiet for fetchQuiet. A commit
// alone does not prove that fetches work: when only fetches fail, the
// autocommit goes on succeeding between them, and ending the outage there
// logged one fault as several. It is safe for concurrent use: kgo reports
// autocommits from its own goroutine.
type kafkaHealth struct {
	logger *slog.Logger
	clock  clock.Clock
	up     prometheus.Gauge

	mu    sync.Mutex
	down  bool
	since time.Time
	errs  int
	// ended is when the last outage ended.
	ended time.Time
	// fetchErr is when a fetch last failed.
	fetchErr time.Time
}

// fetchQuiet is how long after a fetch error a successful commit may end
// an outage. kgo retries a failing fetch after at most a second
// (kafkaconn caps its retry backoff there), so a fetch that still fails
// reports again well within it.
const fetchQuiet = 5 * time.Second

// resetGrace is how long after an outage a partition reset the client
// reports (kgo.ErrDataLoss) is taken as that outage's doing, an INFO, not
// a WARN of its own.
const resetGrace = 10 * time.Second

// reset records a partition reset the client reports: the offset it had
// read to was out of range, and it went on from where the broker's log now
// is. Not an outage (the client has already moved on); a WARN, unless it
// comes with or just after an outage, whose doing it then most likely is.
func (k *kafkaHealth) reset(ctx context.Context, loss *kgo.ErrDataLoss) {
	k.mu.Lock()
	defer k.mu.Unlock()
	level := slog.LevelWarn
	if k.down || k.clock.Now().Sub(k.ended) < resetGrace {
		level = slog.LevelInfo
	}
	k.logger.Log(ctx, level, "kafka reset a partition the attempt log reads: records may have been lost in the broker",
		"topic", loss.Topic, "partition", loss.Partition, "consumed_to", loss.ConsumedTo, "reset_to", loss.ResetTo)
}

func newKafkaHealth(logger *slog.Logger, clk clock.Clock, up prometheus.Gauge) *kafkaHealth {
	up.Set(1)
	return &kafkaHealth{logger: logger, clock: clk, up: up}
}

// fetchFailed records one fetch error; what names the partition.
func (k *kafkaHealth) fetchFailed(ctx context.Context, what string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetchErr = k.clock.Now()
	k.failedLocked(ctx, what, err)
}

// failed records one Kafka error other than a fetch's; what names the
// operation that failed.
func (k *kafkaHealth) failed(ctx context.Context, what string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failedLocked(ctx, what, err)
}

func (k *kafkaHealth) failedLocked(ctx context.Context, what string, err error) {
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

// fetched records a poll that returned records and no error: the broker
// works, ending the outage if there is one.
func (k *kafkaHealth) fetched(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.endLocked(ctx)
}

// committed records a successful offset commit, which ends an outage
// unless a fetch failed within fetchQuiet.
func (k *kafkaHealth) committed(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.clock.Now().Sub(k.fetchErr) < fetchQuiet {
		return
	}
	k.endLocked(ctx)
}

func (k *kafkaHealth) endLocked(ctx context.Context) {
	if !k.down {
		return
	}
	k.down, k.ended = false, k.clock.Now()
	k.up.Set(1)
	k.logger.InfoContext(ctx, "kafka is working again", "outage", k.clock.Now().Sub(k.since), "errors", k.errs)
}

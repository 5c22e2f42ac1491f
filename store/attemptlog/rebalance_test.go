package attemptlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store/attemptlog"
)

// A deliveries partition lost (the group fences the writer) while a batch
// is being gathered, its records polled before the loss and handled after
// it, then assigned to the same writer again and read again from the
// committed offset: the offset committed must not pass the records the
// writer held before the loss, whose rows are not written. Before, the
// held records were dropped at the loss, the records of the batch in hand
// (polled before the loss, offsets 10-19) were held after it as if nothing
// had happened, and those read again (0-19) were queued behind them, so
// the commit went to offset 10: the next writer never read 0-9, their
// pending rows were never written (10 rows of 20).
func TestWriterCommitsNoHeldRecordAfterALostPartition(t *testing.T) {
	t.Parallel()
	tcfg := topics.Config{Partitions: 3}
	kafka := kafkatest.NewProvisioned(t, tcfg)
	b := &bundle{db: pgtest.New(t), kafka: kafka, names: topics.NamesFor(tcfg), reg: prometheus.NewRegistry(),
		clock: fakeclock.New(t0), logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		b.logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	b.producer = kafka.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The highest fetch offset the writer asked for, and a fence
	// (ILLEGAL_GENERATION) armed for its next group heartbeat (every 3s,
	// within the 10s the batch is gathered).
	var fetchedTo atomic.Int64
	kafka.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		for _, rt := range r.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset > fetchedTo.Load() {
					fetchedTo.Store(rp.FetchOffset)
				}
			}
		}
		return nil, nil, false
	})
	var fenceArmed, fenced atomic.Bool
	kafka.ControlKey(kmsg.Heartbeat.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		if !fenceArmed.Load() || !fenced.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := r.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.IllegalGeneration.Code
		return resp, nil, true
	})
	produceDeliveries := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			d, _ := firstAttempt(fmt.Sprintf("l-d%02d", i), fmt.Sprintf("evt-l-%02d", i))
			require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
		}
	}

	// No attempt comes: every delivery record is held for the whole test.
	stop := b.startWriter(t, attemptlog.Config{BatchWait: 10 * time.Second, Hold: 10 * time.Minute, MaxHold: 10 * time.Minute}, b.reg)
	produceDeliveries(0, 10) // one partition (one endpoint), offsets 0-9
	eventually(t, 20*time.Second, "the first delivery records held", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_held_deliveries") == 10
	})
	produceDeliveries(10, 20) // offsets 10-19
	// A fetch from offset 20 follows the poll of 10-19: the writer is
	// gathering its next batch.
	eventually(t, 10*time.Second, "the writer to poll offsets 10-19", func() bool { return fetchedTo.Load() >= 20 })
	fenceArmed.Store(true)
	eventually(t, 10*time.Second, "the writer fenced", fenced.Load)

	// Attempts, one after the other: once the last is written, the batches
	// before it (which hold the records read again after the loss) are
	// written and their offsets committed.
	for i, rec := range history("l-z", "ep2", 2) {
		b.produce(t, rec)
		eventually(t, 20*time.Second, "an attempt written", func() bool {
			return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE delivery_id LIKE 'l-z%'`) == i+1
		})
	}
	stop()

	// The next writer of the group writes every held record pending at
	// once: it must read them all.
	b.startWriter(t, attemptlog.Config{Hold: -1}, prometheus.NewRegistry())
	eventually(t, 20*time.Second, "a pending row for every delivery record", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id LIKE 'l-d%'`) == 20
	})
}

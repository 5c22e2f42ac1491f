package attemptlog_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/store/attemptlog"
)

// Issue 15: a delivery record and its attempt that the writer reads a
// moment apart (the dispatcher's HTTP request in between) are written in
// one batch: the delivery row is inserted once, in its final state
// (created_at = updated_at: no update followed the insert).
func TestWriterGathersADeliveryAndItsAttemptIntoOneWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Fetch requests the broker received since the delivery record exists.
	arm, fetches := b.countFetches()
	b.startWriter(t, attemptlog.Config{BatchWait: 3 * time.Second}, b.reg)

	d, a := firstAttempt("g-d1", "evt-g-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	arm()
	require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
	// A fetch sent after the record was appended answers with it, or the one
	// in flight did and this is the next: either way the writer has it.
	eventually(t, 10*time.Second, "the writer to fetch the delivery record", func() bool { return fetches() >= 2 })
	b.produce(t, a)
	eventually(t, 20*time.Second, "the delivery delivered in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'g-d1' AND status = 'delivered'`) == 1
	})
	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'g-d1' AND created_at = updated_at`),
		"the row was inserted once, not inserted pending and then updated")
	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE attempt_id = 'g-d1-a1'`))
}

// Issue 15: a batch cut short by MaxBatch holds delivery records whose
// attempts follow: they are carried to the next batch, written with their
// attempts (one insert each), and the offsets committed meanwhile stop
// short of them.
func TestWriterCarriesDeliveryRecordsToTheBatchOfTheirAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arm, fetches := b.countFetches()
	const n = 5
	b.startWriter(t, attemptlog.Config{MaxBatch: n, BatchWait: 5 * time.Second}, b.reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var atts []*attempt.Record
	arm()
	for i := range n {
		d, a := firstAttempt(fmt.Sprintf("c-d%d", i), fmt.Sprintf("evt-c-%d", i))
		require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
		atts = append(atts, a)
	}
	eventually(t, 10*time.Second, "the writer to fetch the delivery records", func() bool { return fetches() >= 2 })
	b.produce(t, atts...)
	eventually(t, 20*time.Second, "every delivery delivered in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'`) == n
	})
	require.Equal(t, n, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE created_at = updated_at`),
		"each row inserted once, not inserted pending and then updated")
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
}

// Issue 15: a delivery record is held until its attempt is read, however
// many batches pass meanwhile (at saturation the writer is far behind and a
// delivery's two records land in batches seconds apart): its row is still
// inserted once, in its final state. Before, a record was carried for at
// most 4 BatchWaits and then written pending (and updated later).
func TestWriterHoldsADeliveryRecordUntilItsAttemptArrives(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWriter(t, attemptlog.Config{BatchWait: 20 * time.Millisecond, Hold: 10 * time.Minute, MaxHold: 10 * time.Minute}, b.reg)
	d, a := firstAttempt("h-d1", "evt-h-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
	eventually(t, 10*time.Second, "the delivery record held", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_held_deliveries") == 1
	})
	// Twenty batches of other deliveries' attempts, each gathered for at
	// least BatchWait: far longer than 4 BatchWaits.
	before := metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total")
	for i := range 20 {
		b.produce(t, history(fmt.Sprintf("o%02d", i), "ep2", 1)...)
		eventually(t, 10*time.Second, "the batch written", func() bool {
			return metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total") >= before+float64(i+1)
		})
	}
	require.Equal(t, 0, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'h-d1'`), "no pending row yet")
	require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_attempt_log_held_deliveries"))
	b.produce(t, a)
	eventually(t, 20*time.Second, "the delivery delivered in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'h-d1' AND status = 'delivered'`) == 1
	})
	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = 'h-d1' AND created_at = updated_at`),
		"the row was inserted once, not inserted pending and then updated")
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
}

// A delivery whose first attempt does not come (a paused endpoint, a
// hanging one) shows as pending once Hold has passed; and at MaxHeld the
// writer stops reading delivery records until their attempts release
// some, without losing or skipping any.
func TestWriterWritesHeldDeliveriesPendingAfterHoldAndPacesAtMaxHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWriter(t, attemptlog.Config{BatchWait: 20 * time.Millisecond, Hold: 300 * time.Millisecond, MaxHeld: 2}, b.reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 12
	for i := range n {
		d, _ := firstAttempt(fmt.Sprintf("p-d%02d", i), fmt.Sprintf("evt-p-%02d", i))
		require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
	}
	eventually(t, 30*time.Second, "every delivery pending in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'pending'`) == n
	})
	eventually(t, 20*time.Second, "nothing held any more", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_held_deliveries") == 0
	})
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
}

// At MaxHeld 1 (the least Config accepts) the deliveries topic is paused at
// every record held, and must be resumed once none is: half of 1 is 0 in
// integers, so a writer that resumed below MaxHeld/2 never read a delivery
// record after its first pause (the second record's row never came).
func TestWriterResumesDeliveriesAtMaxHeldOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWriter(t, attemptlog.Config{BatchWait: 20 * time.Millisecond, Hold: 100 * time.Millisecond, MaxHeld: 1}, b.reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		d, _ := firstAttempt(fmt.Sprintf("m-d%d", i), fmt.Sprintf("evt-m-%d", i))
		require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
		eventually(t, 20*time.Second, "the delivery pending in the log", func() bool {
			return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'pending'`) == i+1
		})
	}
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
}

// firstAttempt is a delivery to ep1 and its first attempt, delivered.
func firstAttempt(id, eventID string) (delivery.Delivery, *attempt.Record) {
	d := delivery.Delivery{ID: id, EventID: eventID, EventType: "invoice.paid", EndpointID: "ep1", Account: "acct_1",
		EventCreated: t0, Attempt: 1, Body: []byte(`{}`)}
	return d, &attempt.Record{AttemptID: id + "-a1", DeliveryID: id, EventID: eventID, EventType: d.EventType,
		EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Tier: "webhooks.deliveries",
		StartedAt: t0.Add(time.Second), Duration: time.Millisecond, Outcome: attempt.OutcomeDelivered, StatusCode: 200,
		NextAction: attempt.NextDone}
}

// countFetches counts the fetch requests the broker receives once arm is
// called.
func (b *bundle) countFetches() (arm func(), fetches func() int32) {
	var armed atomic.Bool
	var n atomic.Int32
	b.kafka.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if armed.Load() {
			n.Add(1)
		}
		return nil, nil, false
	})
	return func() { armed.Store(true) }, n.Load
}

// Issue 15: by default a batch holds up to 5,000 records, so a backlog (a
// writer that starts behind, or the load at saturation: ~25,000 records/s,
// half of them delivery records) is written in few, large transactions:
// Postgres's write time per row falls with the batch (BenchmarkWriteAttempts),
// and at 1,000 records a batch held ~430 attempts under `make bench`.
// 3,000 deliveries with their first attempts (6,000 records) already on the
// topics take exactly two batches: a third only if the cap were below 3,000
// (an attempt read before its delivery record creates the row itself), one
// if there were no cap.
func TestWriterWritesABacklogInBatchesOfUpTo5000Records(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 3000
	krs := make([]*kgo.Record, 0, 2*n)
	for i := range n {
		d, a := firstAttempt(fmt.Sprintf("bl-d%d", i), fmt.Sprintf("evt-bl-%d", i))
		ar, err := a.KafkaRecord(b.names.Attempts)
		require.NoError(t, err)
		krs = append(krs, d.Record(b.names.Deliveries), ar)
	}
	b.produceRecords(t, krs...)
	// BatchWait long enough that only MaxBatch (the default) cuts the first
	// batch short, however slowly the test machine fetches; Hold long
	// enough that no held record is written pending meanwhile.
	b.startWriter(t, attemptlog.Config{BatchWait: 5 * time.Second, Hold: time.Minute}, b.reg)
	eventually(t, 60*time.Second, "two batches written", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total") >= 2
	})
	require.Equal(t, 2.0, metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total"))
	require.Equal(t, n, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered' AND created_at = updated_at`),
		"every delivery delivered, each row inserted once in its final state")
}

// A batch also ends at MaxBatchBytes of record values: a delivery record
// carries the webhook's body (up to 256 KiB), and 5,000 of them would be
// over a GiB in hand. 24 bodies of 200 KiB (4.8 MiB) with a 1 MiB cap take
// at least three batches (a batch ends at the first poll reaching the cap;
// a poll here returns one producer batch of at most 1 MiB); without the
// cap, one (BatchWait outlasts the backlog).
func TestWriterCutsABatchAtMaxBatchBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 24
	body := []byte(`{"pad":"` + strings.Repeat("p", 200<<10) + `"}`)
	krs := make([]*kgo.Record, 0, n)
	for i := range n {
		d, _ := firstAttempt(fmt.Sprintf("big-d%d", i), fmt.Sprintf("evt-big-%d", i))
		d.Body = body
		krs = append(krs, d.Record(b.names.Deliveries))
	}
	b.produceRecords(t, krs...)
	b.startWriter(t, attemptlog.Config{BatchWait: 5 * time.Second, Hold: -1, MaxBatchBytes: 1 << 20}, b.reg)
	eventually(t, 60*time.Second, "every delivery pending in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'pending'`) == n
	})
	// The counter moves just after a batch's transaction commits: polled,
	// not read once (read at once it said 2 with all rows in). Without the
	// cut it stays at 1 and this times out.
	eventually(t, 10*time.Second, "at least 3 batches of at most 1 MiB counted", func() bool {
		return metrictest.Value(t, b.reg, "hookd_attempt_log_batches_total") >= 3
	})
}

func (b *bundle) produceRecords(t *testing.T, krs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.producer.ProduceSync(ctx, krs...).FirstErr())
}

package attemptlog_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
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
	var armed atomic.Bool
	var fetches atomic.Int32
	b.kafka.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if armed.Load() {
			fetches.Add(1)
		}
		return nil, nil, false
	})
	b.startWriter(t, attemptlog.Config{BatchWait: 3 * time.Second}, b.reg)

	d := delivery.Delivery{ID: "g-d1", EventID: "evt-g-1", EventType: "invoice.paid", EndpointID: "ep1", Account: "acct_1",
		EventCreated: t0, Attempt: 1, Body: []byte(`{}`)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	armed.Store(true)
	require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
	// A fetch sent after the record was appended answers with it, or the one
	// in flight did and this is the next: either way the writer has it.
	eventually(t, 10*time.Second, "the writer to fetch the delivery record", func() bool { return fetches.Load() >= 2 })
	b.produce(t, &attempt.Record{AttemptID: "g-d1-a1", DeliveryID: d.ID, EventID: d.EventID, EventType: d.EventType,
		EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Tier: b.names.Deliveries,
		StartedAt: t0.Add(time.Second), Duration: time.Millisecond, Outcome: attempt.OutcomeDelivered, StatusCode: 200,
		NextAction: attempt.NextDone})
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
	var armed atomic.Bool
	var fetches atomic.Int32
	b.kafka.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.KeepControl()
		if armed.Load() {
			fetches.Add(1)
		}
		return nil, nil, false
	})
	const n = 5
	b.startWriter(t, attemptlog.Config{MaxBatch: n, BatchWait: 5 * time.Second}, b.reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var atts []*attempt.Record
	armed.Store(true)
	for i := range n {
		d := delivery.Delivery{ID: fmt.Sprintf("c-d%d", i), EventID: fmt.Sprintf("evt-c-%d", i), EventType: "invoice.paid",
			EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Body: []byte(`{}`)}
		require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
		atts = append(atts, &attempt.Record{AttemptID: d.ID + "-a1", DeliveryID: d.ID, EventID: d.EventID, EventType: d.EventType,
			EndpointID: "ep1", Account: "acct_1", EventCreated: t0, Attempt: 1, Tier: b.names.Deliveries,
			StartedAt: t0.Add(time.Second), Duration: time.Millisecond, Outcome: attempt.OutcomeDelivered, StatusCode: 200,
			NextAction: attempt.NextDone})
	}
	eventually(t, 10*time.Second, "the writer to fetch the delivery records", func() bool { return fetches.Load() >= 2 })
	b.produce(t, atts...)
	eventually(t, 20*time.Second, "every delivery delivered in the log", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'`) == n
	})
	require.Equal(t, n, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE created_at = updated_at`),
		"each row inserted once, not inserted pending and then updated")
	eventually(t, 20*time.Second, "the offsets committed at the end", func() bool { return b.committedAtEnd(t) })
}

package dispatcher_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/delivery"
)

// Attempt records linger for more of their partition before they are
// produced (nothing waits for them on a delivery's path), so a steady
// stream of deliveries makes few, large batches for the broker to write
// and the attempt-log writer to read, whatever linger the shared Kafka
// options ask for (the harness asks for none). The bound is relative to
// the stream's duration, so a slow machine does not fail it: one batch of
// the partition per 25ms at most, where the dispatcher's 50ms linger makes
// one per 50ms. Fails with the harness's linger 0 (a batch per record: 250
// in about a second) or kafkaconn's 5ms.
func TestAttemptRecordsAreBatched(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{partitions: 1})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond) // the endpoint's answer time: about 500 deliveries/s one at a time
	})
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL, MaxInFlight: 1})
	const n = 250
	ds := make([]*delivery.Delivery, n)
	for i := range ds {
		ds[i] = newDelivery(fmt.Sprintf("evt_%d", i), "ep_1")
	}
	b.produce(0, ds...)

	// From here on only the dispatcher produces: its intent records (the
	// first batch: a request's intent precedes its attempt record), from a
	// client of their own without linger, and its attempt records, told
	// apart by producer id.
	var mu sync.Mutex
	var batches, records, intentBatches int
	intentProducer := int64(-1)
	var first, last time.Time
	b.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		for _, rt := range r.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(rp.Records); err == nil {
					mu.Lock()
					if intentProducer < 0 {
						intentProducer = rb.ProducerID
					}
					if rb.ProducerID == intentProducer {
						intentBatches++
						mu.Unlock()
						continue
					}
					if batches == 0 {
						first = time.Now()
					}
					last = time.Now()
					batches++
					records += int(rb.NumRecords)
					mu.Unlock()
				}
			}
		}
		return nil, nil, false // kfake answers it
	})
	b.start(dispatcher.Config{AllowPrivateNetworks: true}, runOpts{})
	eventually(t, 60*time.Second, func() bool {
		att, _, _ := b.col.snapshot()
		return len(att) >= n
	}, "%d attempt records", n)

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, records, n, "an attempt record per delivery was produced (a retried produce counts twice)")
	span := last.Sub(first)
	t.Logf("%d attempt records in %d batches over %s (and %d batches of intents)", records, batches, span, intentBatches)
	require.LessOrEqual(t, batches, int(span/(25*time.Millisecond))+2, "at most a batch per 25ms")
}

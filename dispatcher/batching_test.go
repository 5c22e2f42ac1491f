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
// options ask for (the harness asks for none). Fails with kafkaconn's 5ms
// or the harness's 0: about 3 records per batch at this pace, where the
// dispatcher's 50ms makes 20 or more.
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

	// From here on only the dispatcher produces: its attempt records.
	var mu sync.Mutex
	var batches, records int
	b.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		for _, rt := range r.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(rp.Records); err == nil {
					mu.Lock()
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
	require.Equal(t, n, records, "one attempt record per delivery was produced")
	t.Logf("%d attempt records in %d batches", records, batches)
	require.GreaterOrEqual(t, records, 10*batches, "attempt records are produced in batches of 10 or more on average")
}

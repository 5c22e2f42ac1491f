package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/hookd/hookd/dispatcher/internal/sched"
)

// A read-back of partition 3 waits until this process's requests of
// partition 3 completed, and not for those of other partitions.
func TestReadBackWaitsForItsPartitionsRequests(t *testing.T) {
	var f inflight
	f.add(3)
	f.add(3)
	f.add(5)
	starts := map[sched.Partition]time.Time{{Topic: "webhooks.deliveries", Partition: 3}: {}}
	waited := make(chan struct{})
	go func() {
		f.wait(context.Background(), starts)
		close(waited)
	}()
	f.done(3)
	select {
	case <-waited:
		t.Fatal("returned with a request of partition 3 still in flight")
	case <-time.After(50 * time.Millisecond): // no event to wait for: it must still be blocked
	}
	f.done(3)
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after partition 3's requests completed (partition 5's must not count)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.wait(ctx, map[sched.Partition]time.Time{{Topic: "webhooks.deliveries", Partition: 5}: {}}) // returns: ctx ended
}

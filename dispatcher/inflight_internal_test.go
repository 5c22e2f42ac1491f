package dispatcher

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hookd/hookd/dispatcher/internal/sched"
)

// A read-back of deliveries partition 3 waits until this process's
// requests of it completed, and not for those of other partitions, nor of
// the same number in a retry tier (requests of a partition already read
// back: waiting for them held up the poll loop behind a hanging endpoint).
//
// Under testing/synctest, "still blocked" is observed, not timed:
// synctest.Wait returns once the waiting goroutine is durably blocked.
func TestReadBackWaitsForItsPartitionsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f inflight
		p3 := sched.Partition{Topic: "webhooks.deliveries", Partition: 3}
		f.add(p3)
		f.add(p3)
		f.add(sched.Partition{Topic: "webhooks.deliveries", Partition: 5})
		f.add(sched.Partition{Topic: "webhooks.retry.30s", Partition: 3})
		starts := map[sched.Partition]time.Time{p3: {}}
		waited := make(chan struct{})
		go func() {
			f.wait(context.Background(), starts)
			close(waited)
		}()
		f.done(p3)
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("returned with a request of partition 3 still in flight")
		default:
		}
		f.done(p3)
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("still waiting after partition 3's requests completed (the others must not count)")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		f.wait(ctx, map[sched.Partition]time.Time{{Topic: "webhooks.deliveries", Partition: 5}: {}}) // returns: ctx ended
	})
}

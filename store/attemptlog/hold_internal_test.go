package attemptlog

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The attempts clock is the oldest newest-first-attempt among the lagging
// partitions; caught-up partitions, partitions that gave only retries and
// partitions not fetched from for a while do not hold it back.
func TestAttemptsClock(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	fetch := func(p int32, offset, hwm int64) kgo.FetchTopicPartition {
		return kgo.FetchTopicPartition{Topic: "a", FetchPartition: kgo.FetchPartition{Partition: p, HighWatermark: hwm,
			Records: []*kgo.Record{{Partition: p, Offset: offset}}}}
	}
	var c attemptsClock
	if _, lagging := c.at(now); lagging {
		t.Fatal("an empty clock lags")
	}
	c.fetched(fetch(0, 10, 100), now)
	c.firstAttempt(0, now.Add(-30*time.Second))
	c.fetched(fetch(1, 10, 100), now)
	c.firstAttempt(1, now.Add(-20*time.Second))
	c.fetched(fetch(2, 99, 100), now) // caught up
	c.firstAttempt(2, now.Add(-40*time.Second))
	c.fetched(fetch(3, 10, 100), now) // retries only
	at, lagging := c.at(now)
	if !lagging || !at.Equal(now.Add(-30*time.Second)) {
		t.Fatalf("clock %s lagging %v, want %s", at, lagging, now.Add(-30*time.Second))
	}
	// Partition 0 not fetched from for longer than staleAfter: forgotten.
	later := now.Add(staleAfter + time.Second)
	c.fetched(fetch(1, 20, 100), later)
	c.fetched(fetch(3, 20, 100), later)
	if at, _ := c.at(later); !at.Equal(now.Add(-20 * time.Second)) {
		t.Fatalf("clock %s, want partition 1's %s", at, now.Add(-20*time.Second))
	}
}

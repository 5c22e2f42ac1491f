package attemptlog

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store"
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

// Held records are released by their attempt (with every record of the
// same delivery id), by Hold on the wall clock while the writer keeps up,
// by Hold on the attempts clock while it lags, and by MaxHold in any case;
// the committable offset of a partition stops at its first record held,
// also after the partition is read again from an earlier offset.
func TestHoldingsRelease(t *testing.T) {
	cfg := Config{Hold: 5 * time.Second, MaxHold: time.Minute}
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var h holdings
	add := func(id string, p int32, off int64, since, created time.Time) {
		h.read(&kgo.Record{Partition: p, Offset: off})
		h.hold(&heldDelivery{pending: store.PendingDelivery{ID: id, EventCreated: created}, partition: p, offset: off, since: since})
	}
	ids := func(rows []store.PendingDelivery) []string {
		out := []string{}
		for _, r := range rows {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	add("a", 0, 10, t0, t0)
	add("b", 0, 11, t0.Add(time.Second), t0)
	add("a", 1, 5, t0.Add(time.Second), t0) // read twice
	add("c", 1, 6, t0.Add(2*time.Second), t0)
	require.Equal(t, 4, h.count)
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 10}, 1: {Offset: 5}}, h.commitable())

	require.Equal(t, []string{"a", "a"}, ids(h.release(cfg, map[string]bool{"a": true, "x": true}, t0.Add(time.Second))))
	require.Equal(t, 2, h.count)
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 11}, 1: {Offset: 6}}, h.commitable())

	// Keeping up: b was held 5 s at t0+6s, c not yet.
	require.Equal(t, []string{"b"}, ids(h.release(cfg, nil, t0.Add(6*time.Second))))
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 12}, 1: {Offset: 6}}, h.commitable())

	// Lagging: the attempts read are of events created 5 s after c's.
	h.clock.fetched(kgo.FetchTopicPartition{FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: 100,
		Records: []*kgo.Record{{Offset: 1}}}}, t0.Add(6*time.Second))
	h.clock.firstAttempt(0, t0.Add(4*time.Second))
	add("d", 0, 12, t0.Add(6*time.Second), t0.Add(time.Second))
	require.Empty(t, h.release(cfg, nil, t0.Add(6*time.Second)), "the attempts clock is 4 s past c's event")
	h.clock.firstAttempt(0, t0.Add(5*time.Second))
	require.Equal(t, []string{"c"}, ids(h.release(cfg, nil, t0.Add(6*time.Second+lagScanEvery(cfg)))))
	require.Equal(t, 1, h.count)

	// MaxHold, however far behind the attempts are.
	add("e", 2, 0, t0.Add(7*time.Second), t0.Add(7*time.Second))
	h.clock.fetched(kgo.FetchTopicPartition{FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: 100,
		Records: []*kgo.Record{{Offset: 2}}}}, t0.Add(66*time.Second))
	require.Equal(t, []string{"d"}, ids(h.release(cfg, nil, t0.Add(66*time.Second))))

	// Partition 0 read again from an earlier offset (assigned again after a
	// rebalance) behind a record still held: the commit stops at the
	// lowest offset held, not at the first record queued.
	add("f", 0, 13, t0.Add(67*time.Second), t0.Add(67*time.Second))
	add("b", 0, 11, t0.Add(67*time.Second), t0)
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 11}, 1: {Offset: 7}, 2: {Offset: 0}}, h.commitable())
	require.Equal(t, []string{"b", "e", "f"}, ids(h.release(cfg, map[string]bool{"b": true, "e": true, "f": true}, t0.Add(67*time.Second))))
	require.Equal(t, 0, h.count)
	require.Empty(t, h.byID)
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 14}, 1: {Offset: 7}, 2: {Offset: 1}}, h.commitable())
}

// Records released behind one held long (a delivery whose attempt does not
// come, held up to MaxHold) do not pile up in its partition's queue: the
// records kept stay in proportion to the records held (which MaxHeld
// bounds), however many are read and released meanwhile.
func TestHoldingsKeepNoPileOfReleasedRecords(t *testing.T) {
	cfg := Config{Hold: 5 * time.Second, MaxHold: time.Minute}
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var h holdings
	add := func(id string, off int64) {
		h.read(&kgo.Record{Partition: 0, Offset: off})
		h.hold(&heldDelivery{pending: store.PendingDelivery{ID: id, EventCreated: now}, partition: 0, offset: off, since: now})
	}
	add("slow", 0)
	for i := range 100_000 {
		id := fmt.Sprintf("dlv_%d", i)
		add(id, int64(i+1))
		require.Len(t, h.release(cfg, map[string]bool{id: true}, now), 1)
	}
	require.Equal(t, 1, h.count)
	require.LessOrEqual(t, len(h.parts[0].q), 1000, "released records kept in the queue")
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 0}}, h.commitable())
	require.Equal(t, []string{"slow"}, func() []string {
		var out []string
		for _, r := range h.release(cfg, map[string]bool{"slow": true}, now) {
			out = append(out, r.ID)
		}
		return out
	}())
	require.Equal(t, map[int32]kgo.EpochOffset{0: {Offset: 100_001}}, h.commitable())
}

// BenchmarkHoldingsRelease is one batch of 100 attempts against 50,000
// held records (MaxHeld): its cost must not grow with the records held.
func BenchmarkHoldingsRelease(b *testing.B) {
	cfg := Config{Hold: 5 * time.Second, MaxHold: time.Minute}
	now := time.Now()
	var h holdings
	n := 0
	hold := func() {
		id := fmt.Sprintf("dlv_%d", n)
		h.hold(&heldDelivery{pending: store.PendingDelivery{ID: id, EventCreated: now}, partition: int32(n % 6), offset: int64(n), since: now})
		n++
	}
	for range 50000 {
		hold()
	}
	attempted := map[string]bool{}
	b.ResetTimer()
	for range b.N {
		clear(attempted)
		for range 100 {
			attempted[fmt.Sprintf("dlv_%d", n-50000)] = true
			hold()
		}
		if rows := h.release(cfg, attempted, now); len(rows) != 100 {
			b.Fatalf("released %d", len(rows))
		}
		h.commitable()
	}
}

// While records are held, a poll waits BatchWait for more, at least 10ms:
// a negative BatchWait (no gathering) gave polls that returned at once,
// and the writer polled in a busy loop for as long as it held a record.
func TestHoldingPollWaitHasAFloor(t *testing.T) {
	for _, tc := range []struct{ batchWait, want time.Duration }{
		{-1, 10 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond},
		{250 * time.Millisecond, 250 * time.Millisecond},
	} {
		w := &Writer{cfg: Config{BatchWait: tc.batchWait}}
		if got := w.holdingPollWait(); got != tc.want {
			t.Errorf("BatchWait %s: a holding poll waits %s, want %s", tc.batchWait, got, tc.want)
		}
	}
}

package dispatcher

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
)

// pushHeld pushes n records, from offset from on, into ps.
func pushHeld(ps *partState, from, n int) []*item {
	its := make([]*item, n)
	for i := range its {
		its[i] = &item{part: ps, offset: int64(from + i)}
		ps.pending.push(its[i])
		ps.lastSeen = int64(from + i)
	}
	return its
}

// TestHeldQueueWatermarkIsFirstUnfinished: records finished in a random
// order, with new ones read in between, keep the watermark at the first
// unfinished record (or after the last one read) and the count of held
// records exact; finishing a record twice changes nothing.
func TestHeldQueueWatermarkIsFirstUnfinished(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	ps := &partState{lastSeen: -1, committed: -1}
	var open []*item // unfinished, any order
	next := 0
	for round := range 2000 {
		open = append(open, pushHeld(ps, next, rng.IntN(8))...)
		next = int(ps.lastSeen) + 1
		for range rng.IntN(8) {
			if len(open) == 0 {
				break
			}
			i := rng.IntN(len(open))
			require.True(t, ps.pending.finish(open[i]))
			require.False(t, ps.pending.finish(open[i]), "finished twice")
			open[i] = open[len(open)-1]
			open = open[:len(open)-1]
		}
		require.Equal(t, len(open), ps.pending.len(), "round %d", round)
		wm, ok := ps.watermark()
		if next == 0 {
			require.False(t, ok)
			continue
		}
		require.True(t, ok)
		want := int64(next)
		for _, it := range open {
			want = min(want, it.offset)
		}
		require.Equal(t, want, wm.Offset, "round %d: the first unfinished record", round)
		held := ps.pending.all()
		for i := 1; i < len(held); i++ {
			require.Less(t, held[i-1].offset, held[i].offset, "offset order")
		}
	}
}

// TestHeldQueueStuckHead: an unfinished head (a slow request, or a record
// abandoned by a failed produce) holds the watermark while many records
// behind it finish; the queue keeps them in space proportional to the
// unfinished records, not to every record read since the head.
func TestHeldQueueStuckHead(t *testing.T) {
	t.Parallel()
	ps := &partState{lastSeen: -1, committed: -1}
	head := pushHeld(ps, 0, 1)[0]
	for i := 1; i <= 100_500; i++ {
		it := pushHeld(ps, i, 1)[0]
		if i%10 != 0 { // every tenth stays unfinished for a while
			ps.pending.finish(it)
		}
		if i%1000 == 0 {
			for _, it := range ps.pending.all()[1:] {
				if !it.finished {
					ps.pending.finish(it)
				}
			}
		}
		wm, _ := ps.watermark()
		require.Equal(t, int64(0), wm.Offset, "held at the unfinished head")
	}
	require.Equal(t, 1+50, ps.pending.len()) // the head and 100 010, 100 020 ... 100 500
	require.LessOrEqual(t, cap(ps.pending.items), 1024, "finished records behind the head are dropped")

	ps.pending.finish(head)
	wm, _ := ps.watermark()
	require.Equal(t, int64(100_010), wm.Offset, "past the finished ones to the next unfinished")
	for _, it := range slices.Clone(ps.pending.all()) { // finish changes all's slice
		if !it.finished {
			ps.pending.finish(it)
		}
	}
	require.Zero(t, ps.pending.len())
	require.Empty(t, ps.pending.all())
	wm, _ = ps.watermark()
	require.Equal(t, int64(100_501), wm.Offset, "after the last record read")
}

// BenchmarkHeldFinish: a partition holding 2000 records (PartitionMaxHeld's
// default), where each op reads one record and finishes one of those held,
// in random order, as requests to many endpoints end.
func BenchmarkHeldFinish(b *testing.B) {
	const held = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	ps := &partState{lastSeen: -1, committed: -1}
	open := pushHeld(ps, 0, held)
	next := held
	b.ReportAllocs()
	for b.Loop() {
		it := &item{part: ps, offset: int64(next)}
		next++
		ps.pending.push(it)
		i := rng.IntN(len(open))
		ps.pending.finish(open[i])
		open[i] = it
	}
}

// TestFinishingARecordAllocatesNothing: completing a record of a partition
// that is not paused for holding too many records neither allocates nor
// touches the pauses; a full partition is resumed once it holds fewer
// than half of PartitionMaxHeld, and not before.
func TestFinishingARecordAllocatesNothing(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // pausing is local: never dialled
	require.NoError(t, err)
	defer cl.Close()
	tp := kafkaconn.TopicPartition{Topic: "t", Partition: 0}
	d := &Dispatcher{cfg: Config{PartitionMaxHeld: 100}, pauses: &pauses{cl: cl, by: map[kafkaconn.TopicPartition]uint8{}}}
	ps := &partState{tp: tp, lastSeen: -1, committed: -1}
	its := pushHeld(ps, 0, 100)
	ps.running = len(its)
	ps.full = true
	d.pauses.set(tp, pauseFull, true)
	require.Equal(t, map[string][]int32{"t": {0}}, cl.PauseFetchPartitions(nil))

	i := 0
	finish := func() { d.doneLocked(its[i], true); i++ }
	for ps.pending.len() > 50 {
		finish()
		require.Equal(t, map[string][]int32{"t": {0}}, cl.PauseFetchPartitions(nil), "paused down to half")
	}
	finish()
	require.Equal(t, 49, ps.pending.len())
	require.Empty(t, cl.PauseFetchPartitions(nil), "resumed below half")
	require.False(t, ps.full)

	d.pauses = nil // any use of the pauses would panic now
	allocs := testing.AllocsPerRun(40, finish)
	require.Zero(t, allocs, "a completion allocates")
}

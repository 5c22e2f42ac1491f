package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pushHeld pushes n records, from offset from on, into ps.
func pushHeld(ps *part, from, n int) []*Item {
	its := make([]*Item, n)
	for i := range its {
		its[i] = &Item{Record: Record{Offset: int64(from + i)}, part: ps}
		ps.held.push(its[i])
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
	ps := &part{lastSeen: -1, committed: -1}
	var open []*Item // unfinished, any order
	next := 0
	for round := range 2000 {
		open = append(open, pushHeld(ps, next, rng.IntN(8))...)
		next = int(ps.lastSeen) + 1
		for range rng.IntN(8) {
			if len(open) == 0 {
				break
			}
			i := rng.IntN(len(open))
			require.True(t, ps.held.finish(open[i]))
			require.False(t, ps.held.finish(open[i]), "finished twice")
			open[i] = open[len(open)-1]
			open = open[:len(open)-1]
		}
		require.Equal(t, len(open), ps.held.len(), "round %d", round)
		wm, ok := ps.watermark()
		if next == 0 {
			require.False(t, ok)
			continue
		}
		require.True(t, ok)
		want := int64(next)
		for _, it := range open {
			want = min(want, it.Offset)
		}
		require.Equal(t, want, wm.Offset, "round %d: the first unfinished record", round)
		held := ps.held.all()
		for i := 1; i < len(held); i++ {
			if held[i-1].Offset >= held[i].Offset { // not require: thousands of checks, slow under -race
				t.Fatalf("round %d: offsets %d, %d out of order", round, held[i-1].Offset, held[i].Offset)
			}
		}
	}
}

// TestHeldQueueStuckHead: an unfinished head (a slow request, or a record
// abandoned by a failed produce) holds the watermark while many records
// behind it finish; the queue keeps them in space proportional to the
// unfinished records, not to every record read since the head.
func TestHeldQueueStuckHead(t *testing.T) {
	t.Parallel()
	ps := &part{lastSeen: -1, committed: -1}
	head := pushHeld(ps, 0, 1)[0]
	for i := 1; i <= 100_500; i++ {
		it := pushHeld(ps, i, 1)[0]
		if i%10 != 0 { // every tenth stays unfinished for a while
			ps.held.finish(it)
		}
		if i%1000 == 0 {
			for _, it := range ps.held.all()[1:] {
				if !it.finished {
					ps.held.finish(it)
				}
			}
		}
		if wm, _ := ps.watermark(); wm.Offset != 0 { // not require: 100,000 checks, slow under -race
			t.Fatalf("watermark %d, held at the unfinished head 0", wm.Offset)
		}
	}
	require.Equal(t, 1+50, ps.held.len()) // the head and 100 010, 100 020 ... 100 500
	require.LessOrEqual(t, cap(ps.held.items), 1024, "finished records behind the head are dropped")

	ps.held.finish(head)
	wm, _ := ps.watermark()
	require.Equal(t, int64(100_010), wm.Offset, "past the finished ones to the next unfinished")
	for _, it := range slices.Clone(ps.held.all()) { // finish changes all's slice
		if !it.finished {
			ps.held.finish(it)
		}
	}
	require.Zero(t, ps.held.len())
	require.Empty(t, ps.held.all())
	wm, _ = ps.watermark()
	require.Equal(t, int64(100_501), wm.Offset, "after the last record read")
}

// BenchmarkHeldFinish: a partition holding 2000 records (PartitionMaxHeld's
// default), where each op reads one record and finishes one of those held,
// in random order, as requests to many endpoints end.
func BenchmarkHeldFinish(b *testing.B) {
	const held = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	ps := &part{lastSeen: -1, committed: -1}
	open := pushHeld(ps, 0, held)
	next := held
	b.ReportAllocs()
	for b.Loop() {
		it := &Item{Record: Record{Offset: int64(next)}, part: ps}
		next++
		ps.held.push(it)
		i := rng.IntN(len(open))
		ps.held.finish(open[i])
		open[i] = it
	}
}

// TestFinishingARecordAllocatesNothing: finishing a record of a partition
// that is not paused for holding too many records neither allocates nor
// commands anything; a full partition is resumed once it holds fewer than
// half of PartitionMaxHeld, and not before.
func TestFinishingARecordAllocatesNothing(t *testing.T) {
	cfg := defaultConfig()
	cfg.PartitionMaxHeld = 100
	c := New(cfg, func(string) (Endpoint, bool) { return Endpoint{}, false }, nil)
	c.Assign(p0)
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{Part: p0, Offset: int64(i), EndpointID: "gone"}
	}
	cmds := c.Admit(time.Unix(0, 0), recs)
	var its []*Item
	paused := false
	for _, cmd := range cmds {
		if cmd.Kind == Pause {
			paused = true
			continue
		}
		require.Equal(t, Skip, cmd.Kind)
		its = append(its, cmd.Item)
	}
	require.True(t, paused, "paused at PartitionMaxHeld")
	i := 0
	finish := func() []Command { cmds := c.Finished(time.Unix(0, 0), its[i], true); i++; return cmds }
	for c.parts[p0].held.len() > 50 {
		require.Empty(t, finish(), "paused down to half")
	}
	require.Equal(t, []Command{{Kind: Resume, Part: p0}}, finish())
	require.Equal(t, 49, c.parts[p0].held.len())
	allocs := testing.AllocsPerRun(40, func() { finish() })
	require.Zero(t, allocs, "a completion allocates")
}

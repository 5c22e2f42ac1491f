package retrytiers

import (
	"sync"
	"time"

	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/kafkaconn"
)

// Pauser stops and restarts fetching partitions; *kgo.Client is one.
type Pauser interface {
	PauseFetchPartitions(map[string][]int32) map[string][]int32
	ResumeFetchPartitions(map[string][]int32)
}

// Gate holds back tier partitions whose head record is not yet due. Hold
// pauses the partition and arms one timer; when it fires, the gate calls
// onDue, whose owner releases what is due and either holds again (the new
// head is not due) or releases the partition. Nobody sleeps and nobody
// polls: a held partition costs one timer. Forget cleans up on revoke,
// because a paused partition stays paused in the client across rebalances.
type Gate struct {
	clock  clock.Clock
	pauser Pauser
	onDue  func(kafkaconn.TopicPartition)

	mu   sync.Mutex
	held map[kafkaconn.TopicPartition]*hold
}

type hold struct {
	due   time.Time
	timer clock.Timer
	fired bool // its timer has called onDue; guarded by Gate.mu
}

// NewGate returns a gate pausing with pauser and calling onDue (from a
// timer goroutine, without any gate lock held) when a hold expires.
func NewGate(clock clock.Clock, pauser Pauser, onDue func(kafkaconn.TopicPartition)) *Gate {
	return &Gate{clock: clock, pauser: pauser, onDue: onDue, held: map[kafkaconn.TopicPartition]*hold{}}
}

// Hold pauses tp until due. Holding a held partition re-arms its timer,
// also for the same due time once the timer has fired: onDue's owner may
// find the head not yet due (the wall clock stepped back while the timer
// ran on the monotonic clock) and hold it again, and it must fire again.
func (g *Gate) Hold(tp kafkaconn.TopicPartition, due time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, was := g.held[tp]
	if was {
		if old.due.Equal(due) && !old.fired {
			return
		}
		old.timer.Stop()
	}
	h := &hold{due: due}
	g.held[tp] = h
	if !was {
		g.pauser.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
	}
	h.timer = g.clock.AfterFunc(due.Sub(g.clock.Now()), func() {
		g.mu.Lock()
		current := g.held[tp] == h
		h.fired = true
		g.mu.Unlock()
		if current {
			g.onDue(tp)
		}
	})
}

// Release stops holding tp and resumes it.
func (g *Gate) Release(tp kafkaconn.TopicPartition) {
	g.Forget(tp)
}

// Forget stops holding every tp given and resumes them (revoke clean-up).
func (g *Gate) Forget(tps ...kafkaconn.TopicPartition) {
	g.mu.Lock()
	resume := map[string][]int32{}
	for _, tp := range tps {
		if h, ok := g.held[tp]; ok {
			h.timer.Stop()
			delete(g.held, tp)
			resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
		}
	}
	g.mu.Unlock()
	if len(resume) > 0 {
		g.pauser.ResumeFetchPartitions(resume)
	}
}

// Held returns how many partitions are held and the earliest due time.
func (g *Gate) Held() (n int, earliest time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.held {
		if earliest.IsZero() || h.due.Before(earliest) {
			earliest = h.due
		}
	}
	return len(g.held), earliest
}

// IsHeld reports whether tp is currently held.
func (g *Gate) IsHeld(tp kafkaconn.TopicPartition) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.held[tp]
	return ok
}

package dispatcher

import (
	"sync/atomic"
	"time"
)

// Produces unanswered for slowTicks ticks of produceSlow/slowTicks count
// as slow. slowBuckets holds more than slowTicks ticks of starts, so the
// bucket checked at a tick is never the one being filled.
const (
	slowTicks   = 15
	slowBuckets = 2 * (slowTicks + 1)
)

// slowWatch finds produces left unanswered for produceSlow without a timer
// per produce: a produce counts itself in the bucket of the current tick
// while it runs, and every tick checks the bucket of slowTicks ticks ago.
// A produce is reported slowTicks to slowTicks+1 ticks after it started,
// and again every slowBuckets ticks while it stays unanswered. Safe for
// concurrent use; start and done allocate nothing.
type slowWatch struct {
	epoch atomic.Int64
	n     [slowBuckets]atomic.Int64
}

// start counts a produce in; pass its result to done when it is answered.
func (w *slowWatch) start() int64 {
	e := w.epoch.Load()
	w.n[e%slowBuckets].Add(1)
	return e
}

func (w *slowWatch) done(e int64) { w.n[e%slowBuckets].Add(-1) }

// tick advances the clock one tick and reports whether a produce started
// slowTicks ticks ago or earlier is still unanswered.
func (w *slowWatch) tick() bool {
	e := w.epoch.Add(1)
	old := e - slowTicks - 1
	return old >= 0 && w.n[old%slowBuckets].Load() > 0
}

// run ticks every produceSlow/slowTicks until stop is closed, calling
// slow at each tick that finds a slow produce.
func (w *slowWatch) run(stop <-chan struct{}, slow func()) {
	t := time.NewTicker(produceSlow / slowTicks)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if w.tick() {
				slow()
			}
		}
	}
}

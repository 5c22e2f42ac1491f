package sched

import (
	"container/heap"
	"time"
)

// timer is one deadline: an endpoint's next start time (ep), a held
// partition's due time (part) or a FIFO endpoint's in-place retry
// (retry, the endpoint waiting).
type timer struct {
	at    time.Time
	ep    *endpoint
	part  *part
	retry *endpoint
	i     int // index in the heap
}

// timers are the core's deadlines, earliest first.
type timers struct{ h timerHeap }

// set arms *slot at t, replacing the deadline it held.
func (ts *timers) set(slot **timer, t timer) {
	ts.stop(slot)
	e := &t
	heap.Push(&ts.h, e)
	*slot = e
}

// stop disarms *slot, if armed.
func (ts *timers) stop(slot **timer) {
	if e := *slot; e != nil {
		heap.Remove(&ts.h, e.i)
		*slot = nil
	}
}

// fire pops every deadline due at now and calls f with it, disarmed.
func (ts *timers) fire(now time.Time, f func(timer)) {
	for len(ts.h) > 0 && !ts.h[0].at.After(now) {
		e := heap.Pop(&ts.h).(*timer)
		switch {
		case e.ep != nil:
			e.ep.wake = nil
		case e.part != nil:
			e.part.wake = nil
		case e.retry != nil:
			e.retry.retryWake = nil
		}
		f(*e)
	}
}

func (ts *timers) next() (time.Time, bool) {
	if len(ts.h) == 0 {
		return time.Time{}, false
	}
	return ts.h[0].at, true
}

type timerHeap []*timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *timerHeap) Push(x any) {
	e := x.(*timer)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// Package fakeclock is a manual clock for tests of due times and tier
// gates: time moves only when the test says so. It is for tests only.
//
// Internal: only hookd's own packages can import it.
package fakeclock

import (
	"sort"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/clock"
)

// Clock is a manual clock.Clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

var _ clock.Clock = (*Clock)(nil)

type timer struct {
	c  *Clock
	at time.Time
	f  func()
}

// New returns a clock set at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f in its own goroutine once the clock reaches now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	if d <= 0 {
		c.mu.Unlock()
		go f()
		return t
	}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Set moves the clock to at (never backwards) and fires the timers due by then.
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	if at.After(c.now) {
		c.now = at
	}
	var fire []*timer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			fire = append(fire, t)
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(fire, func(i, j int) bool { return fire[i].at.Before(fire[j].at) })
	for _, t := range fire {
		go t.f()
	}
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Pending returns the number of armed timers and the earliest one's time.
func (c *Clock) Pending() (n int, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if next.IsZero() || t.at.Before(next) {
			next = t.at
		}
	}
	return len(c.timers), next
}

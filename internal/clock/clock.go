// Package clock is hookd's time source for due times, tier gates and
// breakers: Clock and Timer, with System, the wall clock. Tests use the
// manual clock in internal/clock/fakeclock. Applications cannot import it.
//
// Internal: only hookd's own packages can import it.
package clock

import "time"

// Clock is the time source of due times and tier gates. Tests inject a
// manual clock so a two-day schedule runs in milliseconds.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether it did.
	Stop() bool
}

// System is the wall clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

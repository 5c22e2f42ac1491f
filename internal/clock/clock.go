// Package clock is hookd's one time source: due times, tier gates,
// breakers, the attempt-log writer and the periodic maintenance roles all
// take a Clock (System, the wall clock, by default). Tests use the manual
// clock in internal/clock/fakeclock.
//
// Internal: only hookd's own packages can import it.
package clock

import "time"

// Clock is the time source. Tests inject a manual clock so a two-day
// schedule runs in milliseconds.
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

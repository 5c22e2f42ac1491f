// Package wait polls a condition with a deadline, for tests: the one
// polling loop hookd's tests share instead of sleeping as synchronisation.
// Unlike testify's Eventually it calls cond on the test's own goroutine, so
// cond may use require and t.Fatal.
//
// Internal: only hookd's own packages can import it.
package wait

import (
	"testing"
	"time"
)

// Interval is how often For polls.
const Interval = 10 * time.Millisecond

// For polls cond until it holds, failing t with "timed out after <within>
// waiting for <what>" once within has passed.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(Interval) // polling interval, not synchronisation
	}
}

// Package drain gives work that must finish after its context ended (a
// final commit, a status update, closing a connection, waiting for
// in-flight requests) a context of its own: it keeps the parent's values,
// ignores the parent's cancellation, and ends after a bound. It is the one
// way hookd writes "finish this after ctx ends".
//
// Internal: only hookd's own packages can import it.
package drain

import (
	"context"
	"time"
)

// Context returns a context that keeps ctx's values but not its
// cancellation, and ends after timeout (never by itself when timeout <= 0).
// Call cancel when the work is done.
func Context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if timeout <= 0 {
		return context.WithCancel(base)
	}
	return context.WithTimeout(base, timeout)
}

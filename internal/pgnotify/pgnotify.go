// Package pgnotify keeps an in-memory copy of a Postgres table fresh
// through LISTEN/NOTIFY: a full reload every time the listening
// connection is (re)established and every resync interval, a refresh of
// the keys notified in between, and a failed connection retried with
// backoff while the copy keeps serving its last state. It owns the loop,
// never the copy: what is read and how it is installed is the caller's,
// and it never queries Postgres itself.
package pgnotify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxBackoff caps the pause between two attempts at listening.
const maxBackoff = 30 * time.Second

// Params is what Follow keeps fresh, and how.
type Params struct {
	// Name starts every log message, e.g. "endpoint index".
	Name string
	// ResyncInterval is how often Reload runs even without notifications,
	// a safety net for a silently dead LISTEN connection. Required: the
	// caller defaults and validates it under its own config's names.
	ResyncInterval time.Duration
	// RetryBackoff is the first pause after the listening connection
	// fails, doubling up to 30s, and the pause before a failed refresh's
	// keys are retried. Required, as ResyncInterval.
	RetryBackoff time.Duration

	// Listen holds a connection listening for changes: once listening it
	// calls onListening, then onChange with the key of every changed row,
	// until ctx ends or the connection fails (store's Listen*Changes).
	Listen func(ctx context.Context, onListening func(context.Context) error, onChange func(key string)) error
	// Reload reads and installs the whole table. It runs once listening
	// (anything changed from then on is notified; its error ends that
	// connection, retried) and every ResyncInterval.
	Reload func(ctx context.Context) error
	// Refresh reads and installs the rows of keys, those notified since
	// its last call, batched. When it fails, Reload runs instead, and if
	// that fails too the keys are retried after RetryBackoff. Nil: every
	// notification runs Reload (for a small table), a failure logged.
	Refresh func(ctx context.Context, keys []string) error

	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Failures counts failed connections, periodic reloads and refreshes;
	// nil counts nowhere.
	Failures prometheus.Counter
}

// Follow runs p's loop until ctx ends.
func Follow(ctx context.Context, p Params) {
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	f := &follower{Params: p, pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	wg.Go(func() { f.refreshLoop(ctx) })
	defer wg.Wait()
	f.listenLoop(ctx)
}

type follower struct {
	Params

	pendingMu sync.Mutex
	pending   map[string]struct{}
	wake      chan struct{}
}

// listenLoop keeps a listening connection up, with a full reload on
// every (re)connect.
func (f *follower) listenLoop(ctx context.Context) {
	backoff := f.RetryBackoff
	for {
		err := f.Listen(ctx, func(ctx context.Context) error {
			backoff = f.RetryBackoff
			return f.Reload(ctx)
		}, f.enqueue)
		if ctx.Err() != nil {
			return
		}
		f.failed()
		f.Logger.WarnContext(ctx, f.Name+": listening for changes failed; serving the last known state",
			"error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (f *follower) enqueue(key string) {
	f.pendingMu.Lock()
	f.pending[key] = struct{}{}
	f.pendingMu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// refreshLoop re-reads what notifications named, many keys at a time,
// and everything every ResyncInterval.
func (f *follower) refreshLoop(ctx context.Context) {
	resync := time.NewTicker(f.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
			if err := f.Reload(ctx); err != nil && ctx.Err() == nil {
				f.failed()
				f.Logger.WarnContext(ctx, f.Name+": periodic reload failed; serving the last known state", "error", err.Error())
			}
		case <-f.wake:
			if !f.refresh(ctx, f.takePending()) {
				return
			}
		}
	}
}

func (f *follower) takePending() []string {
	f.pendingMu.Lock()
	defer f.pendingMu.Unlock()
	keys := make([]string, 0, len(f.pending))
	for k := range f.pending {
		keys = append(keys, k)
	}
	clear(f.pending)
	return keys
}

// refresh re-reads keys, falling back as Params.Refresh says. It returns
// false once ctx ended.
func (f *follower) refresh(ctx context.Context, keys []string) bool {
	if f.Refresh == nil {
		if err := f.Reload(ctx); err != nil && ctx.Err() == nil {
			f.Logger.WarnContext(ctx, f.Name+": reload failed; serving the last known state", "error", err.Error())
		}
		return true
	}
	if len(keys) == 0 {
		return true
	}
	err := f.Refresh(ctx, keys)
	if err == nil {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	f.failed()
	f.Logger.WarnContext(ctx, f.Name+": refreshing changed entries failed; retrying with a full reload",
		"error", err.Error(), "keys", len(keys))
	if err := f.Reload(ctx); err == nil || ctx.Err() != nil {
		return true
	}
	// Put them back and retry after a pause.
	select {
	case <-ctx.Done():
		return false
	case <-time.After(f.RetryBackoff):
	}
	for _, k := range keys {
		f.enqueue(k)
	}
	return true
}

func (f *follower) failed() {
	if f.Failures != nil {
		f.Failures.Inc()
	}
}

// Default timings of a follower: DefaultTiming fills them in.
const (
	DefaultResyncInterval = 5 * time.Minute
	DefaultRetryBackoff   = 500 * time.Millisecond
)

// DefaultTiming sets a zero resync interval or retry backoff (a caller's
// config fields, documented there) to its default.
func DefaultTiming(resync, backoff *time.Duration) {
	if *resync == 0 {
		*resync = DefaultResyncInterval
	}
	if *backoff == 0 {
		*backoff = DefaultRetryBackoff
	}
}

// ValidateTiming checks a caller's resync interval (at least 1s) and retry
// backoff (at least 1ms); what names the caller in the error.
func ValidateTiming(what string, resync, backoff time.Duration) error {
	switch {
	case resync < time.Second:
		return fmt.Errorf("%s resync interval: must be at least 1s, got %s", what, resync)
	case backoff < time.Millisecond:
		return fmt.Errorf("%s retry backoff: must be at least 1ms, got %s", what, backoff)
	}
	return nil
}

package pgnotify_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookd/hookd/internal/pgnotify"
)

// table is what a test follows: its Listen is scripted per connection.
type table struct {
	mu       sync.Mutex
	reloads  []time.Time
	refresh  [][]string
	failNext int // refreshes and reloads to fail, from the first refresh on
	conns    []time.Time
}

func (tb *table) reload(context.Context) error {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.reloads = append(tb.reloads, time.Now())
	if len(tb.refresh) > 0 && tb.failNext > 0 {
		tb.failNext--
		return errors.New("reload failed")
	}
	return nil
}

func (tb *table) refreshKeys(_ context.Context, keys []string) error {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	slices.Sort(keys)
	tb.refresh = append(tb.refresh, keys)
	if tb.failNext > 0 {
		tb.failNext--
		return errors.New("refresh failed")
	}
	return nil
}

// A failed connection is retried after the backoff, with a full reload
// on each connect; notified keys are refreshed; a refresh that fails
// falls back to a reload, and when that fails too the keys are retried
// after the backoff.
func TestFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := &table{failNext: 2}
		failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"})
		listen := func(ctx context.Context, onListening func(context.Context) error, onChange func(string)) error {
			tb.mu.Lock()
			tb.conns = append(tb.conns, time.Now())
			n := len(tb.conns)
			tb.mu.Unlock()
			if err := onListening(ctx); err != nil {
				return err
			}
			if n == 1 {
				return errors.New("connection lost")
			}
			onChange("a")
			<-ctx.Done()
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			pgnotify.Follow(ctx, pgnotify.Params{Name: "test", ResyncInterval: time.Hour, RetryBackoff: time.Second,
				Listen: listen, Reload: tb.reload, Refresh: tb.refreshKeys,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Failures: failures})
		}()
		time.Sleep(10 * time.Second) // fake time: every pause above has passed
		synctest.Wait()
		cancel()
		<-done

		tb.mu.Lock()
		defer tb.mu.Unlock()
		if len(tb.conns) != 2 || tb.conns[1].Sub(tb.conns[0]) != time.Second {
			t.Fatalf("connections at %v: want two, the backoff (1s) apart", tb.conns)
		}
		// Reloads: one per connect, then the failed refresh's fallback (failing).
		if len(tb.reloads) != 3 {
			t.Fatalf("%d reloads, want 3 (two connects, one fallback)", len(tb.reloads))
		}
		want := [][]string{{"a"}, {"a"}}
		if !slices.EqualFunc(tb.refresh, want, slices.Equal) {
			t.Fatalf("refreshes %v, want %v (the failed batch retried)", tb.refresh, want)
		}
		if got := testutil.ToFloat64(failures); got != 2 {
			t.Fatalf("%v failures counted, want 2 (the connection, the refresh)", got)
		}
	})
}

// Without Refresh, every notification runs a full reload.
func TestFollowWithoutRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := &table{}
		notified := make(chan struct{})
		listen := func(ctx context.Context, onListening func(context.Context) error, onChange func(string)) error {
			if err := onListening(ctx); err != nil {
				return err
			}
			onChange("a")
			close(notified)
			<-ctx.Done()
			return ctx.Err()
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			pgnotify.Follow(ctx, pgnotify.Params{Name: "test", ResyncInterval: time.Hour, RetryBackoff: time.Second,
				Listen: listen, Reload: tb.reload, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		}()
		<-notified
		synctest.Wait()
		cancel()
		<-done
		if len(tb.reloads) != 2 {
			t.Fatalf("%d reloads, want 2 (the connect, the notification)", len(tb.reloads))
		}
	})
}

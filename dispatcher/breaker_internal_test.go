package dispatcher

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/clock/fakeclock"
)

// TestBreakerEvictionBoundsMemory: 100k endpoints get a breaker each; once
// idle, the closed ones are evicted, the open and half-open kept.
func TestBreakerEvictionBoundsMemory(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := newMetrics(nil)
	require.NoError(t, err)
	cfg := Config{}
	cfg.setDefaults()
	cfg.Breaker.MinRequests = 3
	cfg.Breaker.OpenFor = 24 * time.Hour // still open at the sweeps
	b := newBreakers(cfg.Breaker, cfg.Timeout, clk, m)
	for i := range 100_000 {
		ticket, err := b.allow(fmt.Sprintf("ep_%d", i))
		require.NoError(t, err)
		b.done(ticket, BreakerSuccess)
	}
	require.Equal(t, 100_000, b.len())
	// Trip three endpoints.
	for i := range 3 {
		for range 3 {
			ticket, err := b.allow(fmt.Sprintf("ep_%d", i))
			if err != nil {
				break // tripped: 2 failures of 3 requests
			}
			b.done(ticket, BreakerFailure)
		}
		_, err := b.allow(fmt.Sprintf("ep_%d", i))
		require.ErrorIs(t, err, ErrCircuitOpen)
	}
	clk.Advance(cfg.Breaker.IdleEvict / 2)
	require.Equal(t, 100_000, b.sweep(), "nothing idle long enough yet")
	clk.Advance(cfg.Breaker.IdleEvict)
	require.Equal(t, 3, b.sweep(), "only the open breakers remain")
	for i := range 3 {
		require.Equal(t, stateOpen, b.state(fmt.Sprintf("ep_%d", i)))
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	var c Config
	c.setDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, "hookd-dispatchers", c.Group)
	require.Equal(t, 4, c.MaxInFlight)
	require.Equal(t, 3*time.Second, c.ConnectTimeout)
	require.Equal(t, 10*time.Second, c.Timeout)
	require.Equal(t, 0.1, c.RetryJitter)
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.MaxInFlight = -1 }, "max in-flight: must be at least 1, got -1"},
		{func(c *Config) { c.Timeout = -time.Second }, "timeout: must be positive, got -1s"},
		{func(c *Config) { c.ConnectTimeout = time.Minute }, "connect timeout: 1m0s is longer than the timeout 10s"},
		{func(c *Config) { c.Breaker.FailureRatio = 2 }, "failure ratio: must be in (0, 1], got 2"},
		{func(c *Config) { c.RetryJitter = 3 }, "retry jitter: must be between 0 and 1, got 3"},
		{func(c *Config) { c.ResponseExcerpt = 1 << 30 }, "response excerpt"},
	} {
		var c Config
		c.setDefaults()
		tc.mut(&c)
		require.ErrorContains(t, c.validate(), tc.want)
	}
	_, err := New(Config{}, Deps{})
	require.ErrorContains(t, err, "Deps.Endpoints")
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	require.Equal(t, "héllo", excerpt([]byte("héllo"), 10))
	require.Equal(t, "h", excerpt([]byte("hé"), 2), "a cut rune is dropped")
	require.Equal(t, "ab", excerpt([]byte("a\x00b"), 10), "no NUL for Postgres text")
	require.Equal(t, "a\uFFFDb", excerpt([]byte("a\xffb"), 10))
}

// newTestBreakers builds breakers with the default config on the wall
// clock: inside a synctest bubble, a fake one that time.Sleep advances.
func newTestBreakers(t *testing.T, mut func(*BreakerConfig)) *breakers {
	return newTestBreakersFor(t, 10*time.Second, mut)
}

// newTestBreakersFor builds them for requests taking up to longest (the
// dispatcher's timeout ceiling).
func newTestBreakersFor(t *testing.T, longest time.Duration, mut func(*BreakerConfig)) *breakers {
	t.Helper()
	m, err := newMetrics(nil)
	require.NoError(t, err)
	cfg := Config{}
	cfg.setDefaults()
	if mut != nil {
		mut(&cfg.Breaker)
	}
	return newBreakers(cfg.Breaker, longest, clock.System{}, m)
}

// TestBreakerOpensOnTimeoutsLongerThanTheWindow is issue 11's repro: an
// endpoint whose requests all time out after 60s (or longer) never
// tripped its 60s-window breaker, because a result arriving a window after
// its request started was dropped. Answers now count when they arrive.
func TestBreakerOpensOnTimeoutsLongerThanTheWindow(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{60 * time.Second, 5 * time.Minute} {
		t.Run(timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTestBreakersFor(t, timeout, nil) // 60s window, 20 requests, 50%
				// 20 requests start together (a high max_in_flight) and
				// all time out together.
				tickets := make([]breakerTicket, 20)
				for i := range tickets {
					var err error
					tickets[i], err = b.allow("ep_hang")
					require.NoError(t, err)
				}
				time.Sleep(timeout)
				for _, tk := range tickets {
					b.done(tk, BreakerFailure)
				}
				_, err := b.allow("ep_hang")
				require.ErrorIs(t, err, ErrCircuitOpen, "20 timeouts of %s open the breaker", timeout)
			})
		})
	}
}

// TestBreakerOpensOnTimeoutsInARow: an endpoint that times out one request
// at a time (max_in_flight 1) never holds MinRequests answers in one
// window; MinRequests failures in a row open it however far apart.
func TestBreakerOpensOnTimeoutsInARow(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{10 * time.Second, 60 * time.Second} {
		t.Run(timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTestBreakersFor(t, timeout, nil)
				fail := func(n int) {
					for range n {
						tk, err := b.allow("ep_slow")
						require.NoError(t, err)
						time.Sleep(timeout)
						b.done(tk, BreakerFailure)
					}
				}
				fail(19)
				tk, err := b.allow("ep_slow")
				require.NoError(t, err)
				b.done(tk, BreakerSuccess) // a success ends the run
				fail(19)
				require.Equal(t, stateClosed, b.state("ep_slow"), "19 in a row")
				fail(1)
				require.Equal(t, stateOpen, b.state("ep_slow"), "20 in a row")
				_, err = b.allow("ep_slow")
				require.ErrorIs(t, err, ErrCircuitOpen)
			})
		})
	}
}

// TestBreakerHalfOpen: after OpenFor one probe goes through; its success
// closes the breaker, its failure opens it again; answers to requests let
// through before the breaker opened count for nothing.
func TestBreakerHalfOpen(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreakers(t, func(c *BreakerConfig) { c.MinRequests = 2 })
		late, err := b.allow("ep")
		require.NoError(t, err)
		for range 2 {
			tk, err := b.allow("ep")
			require.NoError(t, err)
			b.done(tk, BreakerFailure)
		}
		require.Equal(t, stateOpen, b.state("ep"))
		time.Sleep(30*time.Second + time.Millisecond) // just past OpenFor
		require.Equal(t, stateHalfOpen, b.state("ep"))
		probe, err := b.allow("ep")
		require.NoError(t, err)
		_, err = b.allow("ep")
		require.ErrorIs(t, err, ErrCircuitOpen, "one probe at a time")
		b.done(late, BreakerFailure) // from before: ignored
		require.Equal(t, stateHalfOpen, b.state("ep"))
		b.done(probe, BreakerFailure)
		require.Equal(t, stateOpen, b.state("ep"), "a failed probe opens it again")

		time.Sleep(30*time.Second + time.Millisecond)
		probe, err = b.allow("ep")
		require.NoError(t, err)
		b.done(probe, BreakerIgnore) // not the endpoint's doing
		probe, err = b.allow("ep")
		require.NoError(t, err, "an ignored probe lets another through")
		b.done(probe, BreakerSuccess)
		require.Equal(t, stateClosed, b.state("ep"))
	})
}

package dispatcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/fakeclock"
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
	b := newBreakers(cfg.Breaker, clk, m)
	for i := range 100_000 {
		report, err := b.allow(fmt.Sprintf("ep_%d", i))
		require.NoError(t, err)
		report(BreakerSuccess)
	}
	require.Equal(t, 100_000, b.len())
	// Trip three endpoints.
	for i := range 3 {
		for range 3 {
			report, err := b.allow(fmt.Sprintf("ep_%d", i))
			if err != nil {
				break // tripped: 2 failures of 3 requests
			}
			report(BreakerFailure)
		}
		_, err := b.allow(fmt.Sprintf("ep_%d", i))
		require.ErrorIs(t, err, ErrCircuitOpen)
	}
	clk.Advance(cfg.Breaker.IdleEvict / 2)
	require.Equal(t, 100_000, b.sweep(), "nothing idle long enough yet")
	clk.Advance(cfg.Breaker.IdleEvict)
	require.Equal(t, 3, b.sweep(), "only the open breakers remain")
	for i := range 3 {
		require.Equal(t, gobreaker.StateOpen, b.by[fmt.Sprintf("ep_%d", i)].cb.State())
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

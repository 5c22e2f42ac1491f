package retrytiers_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/retrytiers"
)

func policy(t *testing.T, schedule string, r float64) retrytiers.Policy {
	s, err := retrytiers.ParseSchedule(schedule)
	require.NoError(t, err)
	p := retrytiers.Policy{Schedule: s, Jitter: 0.1, Rand: func() float64 { return r }}
	require.NoError(t, p.Validate())
	return p
}

// TestPolicyDefer: a deferral spends no attempt; the first waits the
// first tier, every further one in a row the second, never a later one.
func TestPolicyDefer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	p := policy(t, retrytiers.DefaultSchedule, 0.5) // jitter 5%
	for _, tc := range []struct {
		deferrals int
		tier      int
		due       time.Duration
	}{
		{0, 0, 31500 * time.Millisecond}, // 0 is treated as 1
		{1, 0, 31500 * time.Millisecond},
		{2, 1, 126 * time.Second},
		{3, 1, 126 * time.Second},
		{50, 1, 126 * time.Second},
	} {
		tier, due := p.Defer(tc.deferrals, t0)
		require.Equal(t, tc.tier, tier, "deferral %d", tc.deferrals)
		require.Equal(t, t0.Add(tc.due), due, "deferral %d", tc.deferrals)
	}
	one := policy(t, "5s", 0)
	tier, due := one.Defer(4, t0)
	require.Equal(t, 0, tier, "a one-tier schedule defers to its only tier")
	require.Equal(t, t0.Add(5*time.Second), due)
}

func TestPolicyNext(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		rand       float64
		tier       int
		due        time.Duration
		exhausted  bool
	}{
		{"first failure, no jitter draw", 1, 0, 0, 0, 30 * time.Second, false},
		{"first failure, max jitter", 1, 0, 0.999999, 0, 33 * time.Second, false},
		{"second failure", 2, 0, 0.5, 1, 2*time.Minute + 6*time.Second, false},
		{"last tier", 10, 0, 0, 9, 24 * time.Hour, false},
		{"after last tier", 11, 0, 0, 0, 0, true},
		{"retry-after below the tier delay changes nothing", 1, 10 * time.Second, 0, 0, 30 * time.Second, false},
		{"retry-after 600s moves to the 10m tier", 1, 600 * time.Second, 0, 2, 10 * time.Minute, false},
		{"retry-after 601s moves to the 30m tier", 1, 601 * time.Second, 0, 3, 30 * time.Minute, false},
		{"retry-after beyond the last tier is capped", 1, 72 * time.Hour, 0, 9, 24 * time.Hour, false},
		{"attempt 0 is treated as 1", 0, 0, 0, 0, 30 * time.Second, false},
	} {
		p := policy(t, retrytiers.DefaultSchedule, tc.rand)
		tier, due, ok := p.Next(tc.attempt, t0, tc.retryAfter)
		require.Equal(t, !tc.exhausted, ok, tc.name)
		if tc.exhausted {
			continue
		}
		require.Equal(t, tc.tier, tier, tc.name)
		require.InDelta(t, tc.due.Seconds(), due.Sub(t0).Seconds(), 0.001, tc.name)
		require.False(t, due.Before(t0.Add(min(tc.retryAfter, 24*time.Hour))), "never before Retry-After: %s", tc.name)
	}
}

func TestPolicyJitterStaysInBounds(t *testing.T) {
	t.Parallel()
	s, _ := retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	p := retrytiers.Policy{Schedule: s, Jitter: 0.1}
	t0 := time.Now()
	seen := map[time.Duration]bool{}
	for i := range 2000 {
		attempt := i%10 + 1
		tier, due, ok := p.Next(attempt, t0, 0)
		require.True(t, ok)
		lo, hi := p.Bounds(tier, t0)
		require.False(t, due.Before(lo) || due.After(hi), "attempt %d due %s not in [%s, %s]", attempt, due.Sub(t0), lo.Sub(t0), hi.Sub(t0))
		if attempt == 1 {
			seen[due.Sub(t0)] = true
		}
	}
	require.Greater(t, len(seen), 50, "jitter must spread due times")
	require.Error(t, retrytiers.Policy{Schedule: s, Jitter: 1.5}.Validate())
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in string
		d  time.Duration
		ok bool
	}{
		{"600", 600 * time.Second, true},
		{" 0 ", 0, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"10s", 0, false},
		{"99999999999999999999999", 100 * 365 * 24 * time.Hour, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Mon, 32 Foo 2024 99:00:00 GMT", 0, false},
	} {
		d, ok := retrytiers.ParseRetryAfter(tc.in, now)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.d, d, "%q", tc.in)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "Wed, 21 Oct 2015 07:28:00 GMT", "-1", "1e9", "", "18446744073709551616"} {
		f.Add(s)
	}
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := retrytiers.ParseRetryAfter(s, now)
		if d < 0 {
			t.Fatalf("negative Retry-After %s from %q", d, s)
		}
		if !ok && d != 0 {
			t.Fatalf("invalid %q gave %s", s, d)
		}
	})
}

type pauser struct {
	mu     sync.Mutex
	paused map[string]map[int32]bool
}

func (p *pauser) PauseFetchPartitions(m map[string][]int32) map[string][]int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, ps := range m {
		for _, x := range ps {
			if p.paused[t] == nil {
				p.paused[t] = map[int32]bool{}
			}
			p.paused[t][x] = true
		}
	}
	return nil
}

func (p *pauser) ResumeFetchPartitions(m map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, ps := range m {
		for _, x := range ps {
			delete(p.paused[t], x)
		}
	}
}

func (p *pauser) isPaused(t string, x int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused[t][x]
}

func TestGateHoldsUntilDueAndForgets(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	pz := &pauser{paused: map[string]map[int32]bool{}}
	fired := make(chan kafkaconn.TopicPartition, 4)
	g := retrytiers.NewGate(clk, pz, func(tp kafkaconn.TopicPartition) { fired <- tp })

	tp := kafkaconn.TopicPartition{Topic: "webhooks.retry.30s", Partition: 3}
	g.Hold(tp, clk.Now().Add(30*time.Second))
	require.True(t, pz.isPaused(tp.Topic, 3))
	require.True(t, g.IsHeld(tp))
	n, earliest := g.Held()
	require.Equal(t, 1, n)
	require.Equal(t, clk.Now().Add(30*time.Second), earliest)

	clk.Advance(29 * time.Second)
	select {
	case <-fired:
		t.Fatal("fired before due")
	default:
	}
	clk.Advance(time.Second)
	require.Equal(t, tp, <-fired)
	require.True(t, pz.isPaused(tp.Topic, 3), "the owner releases, not the timer")
	g.Release(tp)
	require.False(t, pz.isPaused(tp.Topic, 3))

	// Re-hold, then revoke: the timer is stopped and the pause cleaned up.
	g.Hold(tp, clk.Now().Add(time.Minute))
	g.Forget(tp)
	require.False(t, pz.isPaused(tp.Topic, 3))
	n, _ = clk.Pending()
	require.Zero(t, n, "a forgotten hold leaves no timer")
	clk.Advance(time.Hour)
	select {
	case <-fired:
		t.Fatal("a forgotten hold fired")
	default:
	}
}

// TestGateHoldAgainAfterFiringRearms: when the timer has fired and the
// owner holds the partition again at the same due time (its clock said
// the head was not due yet: the wall clock stepped back), the gate arms
// a timer again instead of keeping a hold that never fires.
func TestGateHoldAgainAfterFiringRearms(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	pz := &pauser{paused: map[string]map[int32]bool{}}
	fired := make(chan kafkaconn.TopicPartition, 4)
	g := retrytiers.NewGate(clk, pz, func(tp kafkaconn.TopicPartition) { fired <- tp })

	tp := kafkaconn.TopicPartition{Topic: "webhooks.retry.30s", Partition: 1}
	due := clk.Now().Add(30 * time.Second)
	g.Hold(tp, due)
	clk.Advance(30 * time.Second)
	require.Equal(t, tp, <-fired)

	g.Hold(tp, due) // the owner found it not due and holds it again
	require.True(t, pz.isPaused(tp.Topic, 1))
	select {
	case got := <-fired:
		require.Equal(t, tp, got)
	case <-time.After(10 * time.Second):
		t.Fatal("holding again at the same due time after the timer fired armed nothing: the partition stays paused")
	}
}

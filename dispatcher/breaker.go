package dispatcher

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/hookd/hookd/internal/clock"
)

// breakers holds one gobreaker (v2, two-step) per endpoint seen recently.
// Closed breakers idle for cfg.IdleEvict are forgotten; open and half-open
// ones are kept, so memory is bounded by the endpoints active within
// IdleEvict plus the failing ones, whatever the number of endpoints.
//
// gobreaker counts an answer in the window bucket its request started in,
// and drops it when that bucket has rolled out of the window. hookd's
// window is therefore at least twice the longest request (the operator's
// --request-timeout caps every endpoint's timeout), so no answer is ever
// dropped: an endpoint whose requests all time out trips its breaker
// whatever its timeout (issue 11: 60s timeouts never tripped a 60s window).
// MinRequests failures in a row trip it too, however far apart, so an
// endpoint failing slowly one request at a time trips as well.
type breakers struct {
	cfg    BreakerConfig
	window time.Duration
	clock  clock.Clock
	m      *metrics

	mu sync.Mutex
	by map[string]*breaker
}

// breakerState is the state of one breaker.
type breakerState = gobreaker.State

const (
	stateClosed   = gobreaker.StateClosed
	stateOpen     = gobreaker.StateOpen
	stateHalfOpen = gobreaker.StateHalfOpen
)

// breaker is one endpoint's breaker.
type breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	// inARow counts failures since the last success or state change; the
	// window's own consecutive count forgets failures older than the window.
	inARow   atomic.Uint32
	lastUsed time.Time // guarded by breakers.mu
}

// breakerTicket is a request let through; report its effect with done.
type breakerTicket struct {
	b    *breaker // nil when breakers are disabled
	done func(error)
}

var (
	errBreakerFailure = errors.New("breaker failure")
	errBreakerIgnore  = errors.New("breaker ignore")
)

// newBreakers builds the breakers; longest is the longest a request may
// take (the dispatcher's timeout ceiling).
func newBreakers(cfg BreakerConfig, longest time.Duration, clock clock.Clock, m *metrics) *breakers {
	return &breakers{cfg: cfg, window: max(cfg.Window, 2*longest), clock: clock, m: m, by: map[string]*breaker{}}
}

func (bs *breakers) settings(name string, b *breaker) gobreaker.Settings {
	cfg := bs.cfg
	return gobreaker.Settings{
		Name:         name,
		MaxRequests:  cfg.HalfOpenProbes,
		Interval:     bs.window,
		BucketPeriod: max(bs.window/6, time.Second),
		Timeout:      cfg.OpenFor,
		// On answers, not requests: a request still in flight is neither.
		ReadyToTrip: func(c gobreaker.Counts) bool {
			answers := c.TotalSuccesses + c.TotalFailures
			return b.inARow.Load() >= cfg.MinRequests || (answers >= cfg.MinRequests &&
				float64(c.TotalFailures) >= cfg.FailureRatio*float64(answers))
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.inARow.Store(0)
			bs.m.breakers.WithLabelValues(from.String()).Dec()
			bs.m.breakers.WithLabelValues(to.String()).Inc()
			bs.m.breakerTransitions.WithLabelValues(to.String()).Inc()
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return errors.Is(err, errBreakerIgnore) },
	}
}

// get returns endpoint's breaker, creating it, and marks it used.
func (bs *breakers) get(endpoint string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.by[endpoint]
	if !ok {
		b = &breaker{}
		b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](bs.settings(endpoint, b))
		bs.by[endpoint] = b
		bs.m.breakers.WithLabelValues(stateClosed.String()).Inc()
	}
	b.lastUsed = bs.clock.Now()
	return b
}

// allow asks endpoint's breaker for a request. It returns ErrCircuitOpen
// when refused; otherwise done must be called once with the ticket and
// the effect.
func (bs *breakers) allow(endpoint string) (breakerTicket, error) {
	if bs.cfg.Disabled {
		return breakerTicket{}, nil
	}
	b := bs.get(endpoint)
	done, err := b.cb.Allow()
	if err != nil {
		return breakerTicket{}, ErrCircuitOpen
	}
	return breakerTicket{b: b, done: done}, nil
}

// done reports the effect of a request allow let through. Answers to
// requests let through before the breaker's last state change count for
// nothing (gobreaker's generations).
func (bs *breakers) done(t breakerTicket, eff BreakerEffect) {
	if t.b == nil {
		return
	}
	switch eff {
	case BreakerSuccess:
		t.b.inARow.Store(0)
		t.done(nil)
	case BreakerFailure:
		t.b.inARow.Add(1)
		t.done(errBreakerFailure)
	default:
		t.done(errBreakerIgnore)
	}
}

// state returns endpoint's breaker state, closed when it has none.
func (bs *breakers) state(endpoint string) breakerState {
	bs.mu.Lock()
	b, ok := bs.by[endpoint]
	bs.mu.Unlock()
	if !ok {
		return stateClosed
	}
	return b.cb.State()
}

// sweep forgets closed breakers unused since IdleEvict and returns how
// many remain.
func (bs *breakers) sweep() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	cutoff := bs.clock.Now().Add(-bs.cfg.IdleEvict)
	for id, b := range bs.by {
		if b.lastUsed.Before(cutoff) && b.cb.State() == stateClosed {
			delete(bs.by, id)
			bs.m.breakers.WithLabelValues(stateClosed.String()).Dec()
		}
	}
	return len(bs.by)
}

func (bs *breakers) len() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return len(bs.by)
}

package dispatcher

import (
	"errors"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/hookd/hookd/retrytiers"
)

// breakers holds one gobreaker per endpoint seen recently. Closed breakers
// idle for cfg.IdleEvict are forgotten; open and half-open ones are kept,
// so memory is bounded by the endpoints active within IdleEvict plus the
// failing ones, whatever the number of endpoints.
type breakers struct {
	cfg   BreakerConfig
	clock retrytiers.Clock
	m     *metrics

	mu sync.Mutex
	by map[string]*breakerEntry
}

type breakerEntry struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	lastUsed time.Time
}

var (
	errBreakerFailure = errors.New("breaker failure")
	errBreakerIgnore  = errors.New("breaker ignore")
)

func newBreakers(cfg BreakerConfig, clock retrytiers.Clock, m *metrics) *breakers {
	return &breakers{cfg: cfg, clock: clock, m: m, by: map[string]*breakerEntry{}}
}

func (b *breakers) settings(name string) gobreaker.Settings {
	cfg := b.cfg
	return gobreaker.Settings{
		Name:         name,
		MaxRequests:  cfg.HalfOpenProbes,
		Interval:     cfg.Window,
		BucketPeriod: max(cfg.Window/6, time.Second),
		Timeout:      cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= cfg.MinRequests &&
				float64(c.TotalFailures) >= cfg.FailureRatio*float64(c.Requests)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.m.breakers.WithLabelValues(from.String()).Dec()
			b.m.breakers.WithLabelValues(to.String()).Inc()
			b.m.breakerTransitions.WithLabelValues(to.String()).Inc()
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return errors.Is(err, errBreakerIgnore) },
	}
}

// allow asks endpoint's breaker for a request. It returns ErrCircuitOpen
// when refused; otherwise report must be called once with the effect.
func (b *breakers) allow(endpoint string) (report func(BreakerEffect), err error) {
	if b.cfg.Disabled {
		return func(BreakerEffect) {}, nil
	}
	b.mu.Lock()
	e, ok := b.by[endpoint]
	if !ok {
		e = &breakerEntry{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](b.settings(endpoint))}
		b.by[endpoint] = e
		b.m.breakers.WithLabelValues(gobreaker.StateClosed.String()).Inc()
	}
	e.lastUsed = b.clock.Now()
	b.mu.Unlock()
	done, err := e.cb.Allow()
	if err != nil {
		return nil, ErrCircuitOpen
	}
	return func(eff BreakerEffect) {
		switch eff {
		case BreakerSuccess:
			done(nil)
		case BreakerFailure:
			done(errBreakerFailure)
		default:
			done(errBreakerIgnore)
		}
	}, nil
}

// sweep forgets closed breakers unused since IdleEvict and returns how
// many remain.
func (b *breakers) sweep() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	cutoff := b.clock.Now().Add(-b.cfg.IdleEvict)
	for id, e := range b.by {
		if e.lastUsed.Before(cutoff) && e.cb.State() == gobreaker.StateClosed {
			delete(b.by, id)
			b.m.breakers.WithLabelValues(gobreaker.StateClosed.String()).Dec()
		}
	}
	return len(b.by)
}

func (b *breakers) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.by)
}

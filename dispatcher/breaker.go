package dispatcher

import (
	"sync"
	"time"

	"github.com/hookd/hookd/retrytiers"
)

// breakers holds one circuit breaker per endpoint seen recently. Closed
// breakers idle for cfg.IdleEvict are forgotten; open and half-open ones
// are kept, so memory is bounded by the endpoints active within IdleEvict
// plus the failing ones, whatever the number of endpoints.
//
// An answer (or a timeout) is counted when it arrives, in the window
// bucket of its arrival: a request longer than the window still counts,
// so an endpoint whose requests all time out trips its breaker whatever
// its timeout. (Counting by start time, as gobreaker does, dropped every
// result that arrived a window after its request started: a 60s timeout
// never tripped a 60s window.) MinRequests failures in a row trip it too,
// however far apart, so an endpoint failing slowly one request at a time
// trips as well.
type breakers struct {
	cfg    BreakerConfig
	clock  retrytiers.Clock
	m      *metrics
	period time.Duration // of one window bucket

	mu sync.Mutex
	by map[string]*breaker
}

// breakerState is the state of one breaker.
type breakerState uint8

const (
	stateClosed breakerState = iota
	stateOpen
	stateHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateHalfOpen:
		return "half-open"
	}
	return "closed"
}

// breakerBuckets is how many buckets the rolling window has.
const breakerBuckets = 6

// breaker is one endpoint's breaker. Guarded by breakers.mu.
type breaker struct {
	state breakerState
	// gen changes with every state change; answers to requests allowed in
	// an earlier state are not counted.
	gen       uint64
	openUntil time.Time
	// probes is how many half-open probes were let through and not
	// answered with an ignored effect; passed how many succeeded.
	probes, passed uint32
	// inARow is the closed breaker's failures since its last success.
	inARow   uint32
	buckets  [breakerBuckets]breakerBucket
	lastUsed time.Time
}

// breakerBucket counts the answers that arrived in one bucket period.
type breakerBucket struct {
	epoch             int64 // the period's index since the Unix epoch
	answers, failures uint32
}

// breakerTicket is a request let through; report its effect with done.
// A value, so allowing a request allocates nothing.
type breakerTicket struct {
	b   *breaker // nil when breakers are disabled
	gen uint64
}

func newBreakers(cfg BreakerConfig, clock retrytiers.Clock, m *metrics) *breakers {
	return &breakers{cfg: cfg, clock: clock, m: m, period: max(cfg.Window/breakerBuckets, time.Second),
		by: map[string]*breaker{}}
}

// allow asks endpoint's breaker for a request. It returns ErrCircuitOpen
// when refused; otherwise done must be called once with the ticket and
// the effect.
func (bs *breakers) allow(endpoint string) (breakerTicket, error) {
	if bs.cfg.Disabled {
		return breakerTicket{}, nil
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	now := bs.clock.Now()
	b, ok := bs.by[endpoint]
	if !ok {
		b = &breaker{}
		bs.by[endpoint] = b
		bs.m.breakers.WithLabelValues(stateClosed.String()).Inc()
	}
	b.lastUsed = now
	bs.refreshLocked(b, now)
	switch b.state {
	case stateOpen:
		return breakerTicket{}, ErrCircuitOpen
	case stateHalfOpen:
		if b.probes >= bs.cfg.HalfOpenProbes {
			return breakerTicket{}, ErrCircuitOpen
		}
		b.probes++
	}
	return breakerTicket{b: b, gen: b.gen}, nil
}

// done reports the effect of a request allow let through.
func (bs *breakers) done(t breakerTicket, eff BreakerEffect) {
	if t.b == nil {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, now := t.b, bs.clock.Now()
	if b.gen != t.gen {
		return // allowed before the last state change
	}
	switch b.state {
	case stateHalfOpen:
		switch eff {
		case BreakerSuccess:
			if b.passed++; b.passed >= bs.cfg.HalfOpenProbes {
				bs.setLocked(b, stateClosed, now)
			}
		case BreakerFailure:
			bs.setLocked(b, stateOpen, now)
		default:
			b.probes-- // not the endpoint's doing: let another probe through
		}
	case stateClosed:
		switch eff {
		case BreakerSuccess:
			b.inARow = 0
			b.count(now, bs.period, false)
		case BreakerFailure:
			b.inARow++
			b.count(now, bs.period, true)
			if bs.tripsLocked(b, now) {
				bs.setLocked(b, stateOpen, now)
			}
		}
	}
}

// tripsLocked reports whether a closed breaker must open.
func (bs *breakers) tripsLocked(b *breaker, now time.Time) bool {
	if b.inARow >= bs.cfg.MinRequests {
		return true
	}
	answers, failures := b.sums(now, bs.period)
	return answers >= bs.cfg.MinRequests && float64(failures) >= bs.cfg.FailureRatio*float64(answers)
}

// refreshLocked lets an open breaker whose time is up go half-open.
func (bs *breakers) refreshLocked(b *breaker, now time.Time) {
	if b.state == stateOpen && !now.Before(b.openUntil) {
		bs.setLocked(b, stateHalfOpen, now)
	}
}

func (bs *breakers) setLocked(b *breaker, to breakerState, now time.Time) {
	from := b.state
	*b = breaker{state: to, gen: b.gen + 1, lastUsed: b.lastUsed}
	if to == stateOpen {
		b.openUntil = now.Add(bs.cfg.OpenFor)
	}
	bs.m.breakers.WithLabelValues(from.String()).Dec()
	bs.m.breakers.WithLabelValues(to.String()).Inc()
	bs.m.breakerTransitions.WithLabelValues(to.String()).Inc()
}

// count adds one answer at now to its bucket.
func (b *breaker) count(now time.Time, period time.Duration, failed bool) {
	epoch := now.UnixNano() / int64(period)
	bk := &b.buckets[uint64(epoch)%breakerBuckets]
	if bk.epoch != epoch {
		*bk = breakerBucket{epoch: epoch}
	}
	bk.answers++
	if failed {
		bk.failures++
	}
}

// sums returns the answers and failures of the window ending at now.
func (b *breaker) sums(now time.Time, period time.Duration) (answers, failures uint32) {
	epoch := now.UnixNano() / int64(period)
	for _, bk := range b.buckets {
		if bk.epoch > epoch-breakerBuckets && bk.epoch <= epoch {
			answers += bk.answers
			failures += bk.failures
		}
	}
	return answers, failures
}

// state returns endpoint's breaker state, closed when it has none.
func (bs *breakers) state(endpoint string) breakerState {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.by[endpoint]
	if !ok {
		return stateClosed
	}
	bs.refreshLocked(b, bs.clock.Now())
	return b.state
}

// sweep forgets closed breakers unused since IdleEvict and returns how
// many remain.
func (bs *breakers) sweep() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	now := bs.clock.Now()
	cutoff := now.Add(-bs.cfg.IdleEvict)
	for id, b := range bs.by {
		bs.refreshLocked(b, now)
		if b.lastUsed.Before(cutoff) && b.state == stateClosed {
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

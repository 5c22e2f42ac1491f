package dispatcher

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/stage"
)

// metrics of the dispatcher. None has an endpoint label: cardinality stays
// bounded with 100k endpoints.
type metrics struct {
	attempts           *prometheus.CounterVec   // outcome, attempt
	deadLetters        *prometheus.CounterVec   // reason
	latency            *prometheus.HistogramVec // outcome
	inFlight           prometheus.Gauge
	breakers           *prometheus.GaugeVec   // state
	breakerTransitions *prometheus.CounterVec // to
	held               *prometheus.GaugeVec   // topic, partition
	lag                *prometheus.GaugeVec   // topic, partition
	tierWaiting        *prometheus.GaugeVec   // topic
	tierOldestDue      *prometheus.GaugeVec   // topic
	tierLateness       *prometheus.HistogramVec
	rateLimited        prometheus.Counter
	fairShareWaits     prometheus.Counter
	fairShareDeferred  prometheus.Counter
	activeAccounts     prometheus.Gauge
	produceErrors      prometheus.Counter
	malformed          prometheus.Counter
	commits            *prometheus.CounterVec // result
	// Resuming a partition (resume.go).
	resumeSkipped, resumeUnknown, resumeFailures prometheus.Counter
	resumeSeconds                                prometheus.Histogram
	// Intent records and the intents in them (intents.go).
	intentRecords, intents prometheus.Counter
	// stageWait and stageHTTP are the dispatcher's series of the stage
	// histogram shared by the roles of the process (internal/stage).
	stageWait, stageHTTP prometheus.Observer
	// stageIntent is its intent series: the wait for a first attempt's
	// intent record.
	stageIntent prometheus.Observer
	// attemptsBy and latencyBy cache the series of attempts and latency
	// used on every attempt.
	attemptsBy series[attemptKey, prometheus.Counter]
	latencyBy  series[attempt.Outcome, prometheus.Observer]
}

// attemptKey names a series of attempts.
type attemptKey struct {
	outcome attempt.Outcome
	attempt int
}

// series caches the children of a metric vector by a comparable key, so
// that the hot path neither formats nor hashes label values nor takes the
// vector's lock: a lookup reads an immutable map; a new key (a few dozen
// in all: outcomes by attempt number) copies it.
type series[K comparable, M any] struct {
	m   atomic.Pointer[map[K]M]
	mu  sync.Mutex
	new func(K) M
}

func (s *series[K, M]) get(k K) M {
	if m := s.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := map[K]M{}
	if old != nil {
		maps.Copy(next, *old)
	}
	v := s.new(k)
	next[k] = v
	s.m.Store(&next)
	return v
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := newCollectors()
	m.attemptsBy.new = func(k attemptKey) prometheus.Counter {
		return m.attempts.WithLabelValues(string(k.outcome), strconv.Itoa(k.attempt))
	}
	m.latencyBy.new = func(o attempt.Outcome) prometheus.Observer { return m.latency.WithLabelValues(string(o)) }
	h, err := stage.Histogram(reg)
	if err != nil {
		return nil, fmt.Errorf("registering the stage histogram: %w", err)
	}
	m.stageWait, m.stageHTTP = h.WithLabelValues(stage.DispatchWait), h.WithLabelValues(stage.HTTP)
	m.stageIntent = h.WithLabelValues(stage.Intent)
	if reg == nil {
		return m, nil
	}
	return m, m.register(reg)
}

// newCollectors makes the dispatcher's metrics, not yet registered.
func newCollectors() *metrics {
	const ns, sub = "hookd", "dispatcher"
	return &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "attempts_total",
			Help: "Attempts (or decisions taken instead of one) by outcome and attempt number; sum by outcome for deliveries by outcome."},
			[]string{"outcome", "attempt"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dead_letters_total",
			Help: "Records produced to the dead-letter topic, by reason."}, []string{"reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "attempt_duration_seconds",
			Help: "Duration of HTTP attempts, by outcome.", Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}},
			[]string{"outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "in_flight_requests",
			Help: "HTTP requests in flight."}),
		breakers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "breakers",
			Help: "Per-endpoint circuit breakers held, by state (closed, open, half-open)."}, []string{"state"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "breaker_transitions_total",
			Help: "Circuit breaker state changes, by new state."}, []string{"state"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "held_records",
			Help: "Records read but not finished, per partition."}, []string{"topic", "partition"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "commit_watermark_lag_records",
			Help: "Offsets between the commit watermark (first unfinished record) and the last record read, per partition."},
			[]string{"topic", "partition"}),
		tierWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "tier_waiting_records",
			Help: "Records read from a topic and waiting for their due time, by topic."}, []string{"topic"}),
		tierOldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "tier_oldest_due_age_seconds",
			Help: "How long the oldest record read from a retry tier that is due (due time passed) has been waiting to be attempted, by topic; 0 when none."},
			[]string{"topic"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "Times an endpoint with queued records had to wait for its next start time (its rate_per_sec) before a request."}),
		fairShareWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fair_share_waits_total",
			Help: "Times an endpoint ready to start a request had to wait because its account held its fair share of the process's concurrency while other accounts were active."}),
		fairShareDeferred: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fair_share_deferred_total",
			Help: "Records sent to the first retry tier without an attempt (error class fair_share) because their account, holding its share of the process's concurrency with no answer for a second while other accounts were active, would otherwise fill their partition and pause it."}),
		activeAccounts: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "active_accounts",
			Help: "Accounts sharing this process's concurrency: with requests in flight or ready, or within the linger time of their last one. Each may hold max(ceil(concurrency/active), 4) requests; one alone may hold all."}),
		tierLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "tier_release_lateness_seconds",
			Help:    "How long after its due time a retry record was released to its endpoint, by topic.",
			Buckets: []float64{.01, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}}, []string{"topic"}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "produce_errors_total",
			Help: "Failed produces of retry, dead-letter or attempt records, each retried with backoff until Kafka acknowledges it; one cut by shutdown leaves its source record unfinished, re-read after the restart."}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "malformed_records_total",
			Help: "Records that are not valid deliveries (dead-lettered)."}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commits_total",
			Help: "Offset commits, by result."}, []string{"result"}),
		resumeSkipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "resume_skipped_total",
			Help: "Records past a partition's committed offset finished without a request when the partition was assigned: their attempt records, produced by the partition's previous owner, were read back."}),
		resumeUnknown: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "resume_unknown_total",
			Help: "Requests a previous owner of a partition sent and never recorded the answer of (it stopped during them), found by their intent records when the partition was assigned: each is logged with outcome unknown and its delivery attempted again."}),
		resumeFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "resume_failures_total",
			Help: "Read-backs of the attempts topic that failed when partitions were assigned; their records are attempted again from the committed offset, answered or not."}),
		resumeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "resume_seconds",
			Help:    "How long resuming newly assigned partitions held their first records: the wait for this process's requests still in flight on them plus the read-back of the attempts and intents topics. The poll, and so the next rebalance, waits for it.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		intentRecords: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "intent_records_total",
			Help: "Intent records produced to the intents topic (acknowledged); each carries the intents of the requests started while the one before it was produced."}),
		intents: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "intents_total",
			Help: "Intents produced (acknowledged), one per request sent: intents_total / intent_records_total is the batch size."}),
	}
}

// register registers m's collectors with reg.
func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.attempts, m.deadLetters, m.latency, m.inFlight, m.breakers, m.breakerTransitions,
		m.held, m.lag, m.tierWaiting, m.tierOldestDue, m.tierLateness, m.rateLimited, m.fairShareWaits, m.fairShareDeferred, m.activeAccounts, m.produceErrors, m.malformed, m.commits,
		m.resumeSkipped, m.resumeUnknown, m.resumeFailures, m.resumeSeconds, m.intentRecords, m.intents} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return fmt.Errorf("registering dispatcher metrics: %w (one dispatcher per registry)", err)
			}
			return fmt.Errorf("registering dispatcher metrics: %w", err)
		}
	}
	return nil
}

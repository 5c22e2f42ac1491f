package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/clock"
)

// permanent are the Kafka errors that waiting does not fix: the credentials
// are refused, hookd is not allowed to use a topic or group, a topic is
// missing (hookd provisions its topics at start-up, so a missing one was
// deleted) or a record can never be accepted.
var permanent = []error{
	kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.IllegalSaslState,
	kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.UnknownTopicOrPartition, kerr.InvalidTopicException, kerr.InvalidPartitions,
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRequiredAcks,
}

// Permanent reports whether err (from a produce, fetch, commit or group
// request) is one that waiting will not fix: authentication, authorization,
// an unknown topic or partition, a record the broker can never accept. A
// role ends on a permanent error, with one clear line, and waits out any
// other: an unreachable or restarting broker, a leader election, a timeout.
func Permanent(err error) bool {
	for _, p := range permanent {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Interval is the time between two probes. Defaults to 1s.
	Interval time.Duration
	// Timeout bounds one probe (a metadata request). Defaults to 1s.
	Timeout time.Duration
	// Failures is how many probes in a row must fail before Kafka counts
	// as unreachable, so one slow answer does not flap readiness.
	// Defaults to 2.
	Failures int
}

func (c *MonitorConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	if c.Failures == 0 {
		c.Failures = 2
	}
}

func (c *MonitorConfig) validate() error {
	switch {
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("kafka probe interval: must be at least 10ms, got %s", c.Interval)
	case c.Timeout < 10*time.Millisecond:
		return fmt.Errorf("kafka probe timeout: must be at least 10ms, got %s", c.Timeout)
	case c.Failures < 1:
		return fmt.Errorf("kafka probe failures: must be at least 1, got %d", c.Failures)
	}
	return nil
}

// MonitorDeps are a Monitor's collaborators.
type MonitorDeps struct {
	// Client is probed; required. The daemon's admin client serves.
	Client *kgo.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the outage metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock dates the outages. Defaults to clock.System{}.
	Clock clock.Clock
	// Dials, when Client was built with it as a hook, names the last
	// connection error in the reason of a probe that got no answer (e.g.
	// "connection refused" for a stopped broker). Optional.
	Dials *DialErrors
}

// DialErrors is a kgo hook that keeps the last failed connection attempt
// of a client, for the Monitor's reason.
type DialErrors struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

var _ kgo.HookBrokerConnect = (*DialErrors)(nil)

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (d *DialErrors) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.at, d.last = time.Now(), fmt.Errorf("%s: %w", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err)
	}
}

// since returns the last connection error, if it happened after t.
func (d *DialErrors) since(t time.Time) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at.Before(t) {
		return nil
	}
	return d.last
}

// Monitor watches whether the Kafka brokers answer, one per process: it
// probes them every Interval, logs one WARN when they stop answering and
// one INFO when they are back, exports hookd_kafka_reachable,
// hookd_kafka_outages_total and hookd_kafka_outage_seconds_total, and
// answers Err at once (readiness reads it instead of asking the brokers per
// request). It only observes: the roles wait out an outage on their own.
type Monitor struct {
	cfg    MonitorConfig
	deps   MonitorDeps
	logger *slog.Logger

	mu    sync.Mutex
	st    outageState
	gauge prometheus.Gauge
	count prometheus.Counter
}

type outageState struct {
	fails     int       // probes failed in a row
	firstFail time.Time // when the current run of failures began
	down      bool      // reported unreachable
	lastErr   error
	closedSec float64 // seconds of the outages that ended
}

// UnreachableError is Monitor.Err while Kafka is unreachable.
type UnreachableError struct {
	// Since is when the first failed probe of the outage was sent.
	Since time.Time
	// For is how long the outage has lasted so far.
	For time.Duration
	// Err is the last probe's error.
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("unreachable since %s (%s): %v", e.Since.UTC().Format(time.RFC3339), e.For.Round(time.Second), e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// NewMonitor validates cfg and registers the metrics; Run probes.
func NewMonitor(cfg MonitorConfig, deps MonitorDeps) (*Monitor, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Client == nil {
		return nil, errors.New("kafka monitor: no client")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	m := &Monitor{cfg: cfg, deps: deps, logger: deps.Logger}
	m.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "hookd_kafka_reachable",
		Help: "1 while the Kafka brokers answer hookd's probes, 0 during an outage."})
	m.gauge.Set(1)
	m.count = prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_kafka_outages_total",
		Help: "Kafka outages seen by this process: runs of failed probes long enough to mark Kafka unreachable."})
	seconds := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hookd_kafka_outage_seconds_total",
		Help: "Seconds Kafka was unreachable, the current outage included."}, m.outageSeconds)
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{m.gauge, m.count, seconds} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("kafka monitor metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Run probes every Interval until ctx ends, then returns nil.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		start := m.deps.Clock.Now()
		err := m.probe(ctx)
		if ctx.Err() != nil {
			return nil // stopping ends no outage
		}
		m.record(ctx, start, err)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Err is nil while Kafka answers, an *UnreachableError during an outage.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.down {
		return nil
	}
	return &UnreachableError{Since: m.st.firstFail, For: m.deps.Clock.Now().Sub(m.st.firstFail), Err: m.st.lastErr}
}

// probe asks a broker for the cluster's metadata (no topics) within
// Timeout. It sends a request every time: kadm's metadata calls may answer
// from the client's cache.
func (m *Monitor) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	_, err := req.RequestWith(pctx, m.deps.Client)
	switch {
	case err == nil:
		return nil
	case pctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
		if dial := m.deps.Dials.since(sent); dial != nil {
			return fmt.Errorf("no answer within %s; last connection attempt: %w", m.cfg.Timeout, dial)
		}
		return fmt.Errorf("no answer within %s", m.cfg.Timeout)
	}
	return err
}

// record notes one probe, sent at start, and its result.
func (m *Monitor) record(ctx context.Context, start time.Time, err error) {
	now := m.deps.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.st.fails == 0 {
			m.st.firstFail = start
		}
		m.st.fails++
		m.st.lastErr = err
		if !m.st.down && m.st.fails >= m.cfg.Failures {
			m.st.down = true
			m.gauge.Set(0)
			m.count.Inc()
			m.logger.WarnContext(ctx, "kafka unreachable; roles wait for it", "since", m.st.firstFail.UTC().Format(time.RFC3339), "error", err.Error())
		}
		return
	}
	if m.st.down {
		d := now.Sub(m.st.firstFail)
		m.st.closedSec += d.Seconds()
		m.gauge.Set(1)
		m.logger.InfoContext(ctx, "kafka reachable again", "outage", d.Round(time.Millisecond).String())
	}
	m.st = outageState{closedSec: m.st.closedSec}
}

func (m *Monitor) outageSeconds() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st.closedSec
	if m.st.down {
		s += m.deps.Clock.Now().Sub(m.st.firstFail).Seconds()
	}
	return s
}

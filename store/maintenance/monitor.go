package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/clock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store"
)

// DefaultDisableAfter is how long an endpoint may fail continuously before
// hookd disables it (--disable-after).
const DefaultDisableAfter = 72 * time.Hour

// MonitorConfig configures the Monitor.
type MonitorConfig struct {
	// OpsTopic receives endpoint.disabled events. Defaults to "webhooks.ops".
	OpsTopic string
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled. Defaults to 72h; at least 1m.
	DisableAfter time.Duration
	// Interval between two sweeps. Defaults to 1m.
	Interval time.Duration
	// FlushLimit caps the owed events produced per sweep (of each kind).
	// Defaults to 100.
	FlushLimit int
	// EventsTopic receives the owner alerts (hookd.* events), fanned out
	// from there like any event. Defaults to "webhooks.events".
	EventsTopic string
	// PortalBaseURL prefixes the alerts' portal links (the portal's public
	// origin); empty gives paths ("/portal/endpoints/ep_1"). Defaults to "".
	PortalBaseURL string
	// WarnAfter is how long an endpoint fails continuously before
	// hookd.endpoint.failing (--warn-after), once per failing episode.
	// Defaults to 24h, or half of DisableAfter when that is shorter than
	// 48h; above 0 and below DisableAfter.
	WarnAfter time.Duration
	// AlertGrace is how long after an hour ends its dead letters are
	// aggregated into hookd.delivery.dead_lettered, for attempt records
	// still on their way to the log. Defaults to 5m; at least 0.
	AlertGrace time.Duration
}

func (c *MonitorConfig) setDefaults() {
	if c.OpsTopic == "" {
		c.OpsTopic = "webhooks.ops"
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = DefaultDisableAfter
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.FlushLimit == 0 {
		c.FlushLimit = 100
	}
	if c.EventsTopic == "" {
		c.EventsTopic = "webhooks.events"
	}
	if c.WarnAfter == 0 {
		c.WarnAfter = min(DefaultWarnAfter, c.DisableAfter/2)
	}
	if c.AlertGrace == 0 {
		c.AlertGrace = 5 * time.Minute
	}
}

func (c *MonitorConfig) validate() error {
	switch {
	case c.DisableAfter < time.Minute:
		return fmt.Errorf("disable after: must be at least 1m, got %s", c.DisableAfter)
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("endpoint health interval: must be at least 10ms, got %s", c.Interval)
	case c.FlushLimit < 1:
		return fmt.Errorf("endpoint health flush limit: must be at least 1, got %d", c.FlushLimit)
	case c.WarnAfter <= 0 || c.WarnAfter >= c.DisableAfter:
		return fmt.Errorf("warn after: must be above 0 and below --disable-after (%s), got %s", c.DisableAfter, c.WarnAfter)
	case c.AlertGrace < 0:
		return fmt.Errorf("alert grace: must not be negative, got %s", c.AlertGrace)
	}
	return nil
}

// MonitorDeps are what the Monitor works with.
type MonitorDeps struct {
	Store  *store.Store
	Logger *slog.Logger
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// KafkaOpts build the producer of the ops topic (seeds, logging, ...).
	KafkaOpts []kgo.Opt
	// Clock is the time source. Defaults to clock.System{}.
	Clock clock.Clock
}

// Monitor is the endpoint-health sweep role. Every Interval it disables the
// active endpoints failing for longer than DisableAfter (the attempt-log
// writer does the same as attempts arrive; this catches endpoints that no
// longer receive any), produces the endpoint.disabled events still owed,
// produces the owner alerts (hookd.endpoint.failing past WarnAfter,
// hookd.endpoint.recovered, hookd.delivery.dead_lettered per endpoint per
// hour; see alerts.go), and refreshes the hookd_endpoints_disabled gauge.
type Monitor struct {
	cfg      MonitorConfig
	deps     MonitorDeps
	metrics  *Metrics
	disabled prometheus.Gauge
	errors   prometheus.Counter
}

// NewMonitor checks cfg and registers the metrics.
func NewMonitor(cfg MonitorConfig, deps MonitorDeps) (*Monitor, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkDeps("endpoint health", deps.Store, deps.Logger, deps.Registerer, &deps.Clock); err != nil {
		return nil, err
	}
	m, err := NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	mon := &Monitor{cfg: cfg, deps: deps, metrics: m,
		disabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_endpoints_disabled",
			Help: "Endpoints in status disabled, as of the last health sweep.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_endpoint_health_sweep_errors_total",
			Help: "Endpoint-health sweeps that failed (Postgres or Kafka unavailable).",
		}),
	}
	for _, c := range []prometheus.Collector{mon.disabled, mon.errors} {
		if err := deps.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("registering endpoint health metrics: %w", err)
		}
	}
	return mon, nil
}

// Name is the role's name in logs.
func (m *Monitor) Name() string { return "endpoint-health" }

// Run sweeps at once, then every Interval, until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(m.deps.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("endpoint health: kafka client: %w", err)
	}
	defer cl.Close()
	ann := NewAnnouncer(cl, m.deps.Store, AlertTopics{Events: m.cfg.EventsTopic, Ops: m.cfg.OpsTopic,
		PortalBaseURL: m.cfg.PortalBaseURL}, m.deps.Logger, m.metrics)
	return everyInterval(ctx, m.cfg.Interval, m.deps.Logger, "endpoint health sweep", m.errors,
		func(ctx context.Context) error { return m.sweep(ctx, ann) })
}

// sweep runs one pass with ann.
func (m *Monitor) sweep(ctx context.Context, ann *Announcer) error {
	ds, err := m.deps.Store.DisableFailingEndpoints(ctx, m.deps.Clock.Now(), m.cfg.DisableAfter)
	if err != nil {
		return err
	}
	// The fresh disablements are announced (and marked) here; Flush then
	// finds only the older owed events.
	errs := []error{ann.Disabled(ctx, ds), ann.Flush(ctx, m.cfg.FlushLimit), m.alertSweep(ctx, ann)}
	n, err := m.deps.Store.CountDisabledEndpoints(ctx)
	if err != nil {
		errs = append(errs, err)
	} else {
		m.disabled.Set(float64(n))
	}
	return errors.Join(errs...)
}

package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/store"
)

// MaintainerConfig configures the partition Maintainer.
type MaintainerConfig struct {
	// Retention: daily attempt partitions that end before now - Retention
	// are dropped (--attempt-retention). Defaults to 30 days; at least 24h.
	Retention time.Duration
	// Ahead is how many days of partitions exist ahead of today, so that
	// attempts never land in the default partition. Defaults to 3.
	Ahead int
	// Interval between two passes. Defaults to 1h.
	Interval time.Duration
}

func (c *MaintainerConfig) setDefaults() {
	if c.Retention == 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	if c.Ahead == 0 {
		c.Ahead = 3
	}
	if c.Interval == 0 {
		c.Interval = time.Hour
	}
}

func (c *MaintainerConfig) validate() error {
	switch {
	case c.Retention < 24*time.Hour:
		return fmt.Errorf("attempt retention: must be at least 24h, got %s", c.Retention)
	case c.Ahead < 1 || c.Ahead > 60:
		return fmt.Errorf("attempt partitions ahead: must be between 1 and 60, got %d", c.Ahead)
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("attempt partition maintenance interval: must be at least 10ms, got %s", c.Interval)
	}
	return nil
}

// MaintainerDeps are what the Maintainer works with.
type MaintainerDeps struct {
	Store  *store.Store
	Logger *slog.Logger
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Clock is the time source. Defaults to clock.System{}.
	Clock clock.Clock
}

// Maintainer is the attempt-partition maintenance role: at start and every
// Interval it creates the daily partitions of webhooks.attempts ahead and
// drops the ones past the retention (store.MaintainAttemptPartitions), then
// erases the attempts delivery rows hold from before the retention
// (store.ClearExpiredHeldAttempts), so that no attempt's data outlives
// it. It is
// idempotent; running it in several processes is harmless (a pass that
// races another one fails and is retried at the next interval).
type Maintainer struct {
	cfg     MaintainerConfig
	deps    MaintainerDeps
	dropped prometheus.Counter
	cleared prometheus.Counter
	errors  prometheus.Counter
	last    prometheus.Gauge
}

// NewMaintainer checks cfg and registers the metrics.
func NewMaintainer(cfg MaintainerConfig, deps MaintainerDeps) (*Maintainer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkDeps("attempt partition maintenance", deps.Store, deps.Logger, deps.Registerer, &deps.Clock); err != nil {
		return nil, err
	}
	m := &Maintainer{cfg: cfg, deps: deps,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_partitions_dropped_total",
			Help: "Daily attempt-log partitions dropped for being older than the retention.",
		}),
		cleared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_held_cleared_total",
			Help: "Delivery rows whose held first attempt was erased for being older than the retention.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_partition_maintenance_errors_total",
			Help: "Attempt-partition maintenance passes that failed.",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_attempt_partition_maintenance_last_success_timestamp_seconds",
			Help: "Unix time of the last successful attempt-partition maintenance pass.",
		}),
	}
	if err := register("attempt partition", deps.Registerer, m.dropped, m.cleared, m.errors, m.last); err != nil {
		return nil, err
	}
	return m, nil
}

// Name is the role's name in logs.
func (m *Maintainer) Name() string { return "attempt-partitions" }

// Run maintains at once, then every Interval, until ctx ends.
func (m *Maintainer) Run(ctx context.Context) error {
	return everyInterval(ctx, m.cfg.Interval, m.deps.Logger, "attempt partition maintenance", m.errors, m.pass)
}

// pass creates the partitions ahead, drops the expired ones and erases
// the expired held attempts. A pass that fails (or ends) half-way keeps
// what it did; the next one does the rest.
func (m *Maintainer) pass(ctx context.Context) error {
	now := m.deps.Clock.Now()
	res, err := m.deps.Store.MaintainAttemptPartitions(ctx, now, m.cfg.Ahead, m.cfg.Retention)
	if err != nil {
		return err
	}
	m.dropped.Add(float64(len(res.Dropped)))
	if len(res.Dropped) > 0 {
		m.deps.Logger.InfoContext(ctx, "attempt partitions dropped", "partitions", res.Dropped, "retention", m.cfg.Retention)
	}
	start := m.deps.Clock.Now()
	cleared, err := m.deps.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{})
	m.cleared.Add(float64(cleared))
	if cleared > 0 {
		m.deps.Logger.InfoContext(ctx, "held attempts erased", "rows", cleared, "retention", m.cfg.Retention,
			"took", m.deps.Clock.Now().Sub(start))
	}
	if err != nil {
		return err
	}
	m.last.Set(float64(now.Unix()))
	return nil
}

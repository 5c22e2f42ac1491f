package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// ReconcilerConfig configures the Reconciler.
type ReconcilerConfig struct {
	// Interval between two checks. Defaults to 1m.
	Interval time.Duration
	// PendingGrace: a delivery still pending (never attempted) this long
	// after its creation is overdue. Defaults to 15m.
	PendingGrace time.Duration
	// DueGrace: a retrying delivery not attempted this long after its next
	// due time is overdue. Defaults to 15m.
	DueGrace time.Duration
	// Schedule is the retry schedule (--retry-schedule); it sets the default
	// MaxAge. Defaults to retrytiers.DefaultSchedule.
	Schedule retrytiers.Schedule
	// MaxAge: a delivery non-terminal for longer than this is overdue
	// whatever its next due time. Defaults to the schedule's total plus 25%
	// (for jitter and Retry-After) plus DueGrace: about 65h for the default
	// schedule.
	MaxAge time.Duration
	// Examples caps the overdue deliveries named in the log line.
	// Defaults to 10.
	Examples int
}

func (c *ReconcilerConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.PendingGrace == 0 {
		c.PendingGrace = 15 * time.Minute
	}
	if c.DueGrace == 0 {
		c.DueGrace = 15 * time.Minute
	}
	if c.Schedule == nil {
		c.Schedule, _ = retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	}
	if c.MaxAge == 0 {
		total := c.Schedule.Total()
		c.MaxAge = total + total/4 + c.DueGrace
	}
	if c.Examples == 0 {
		c.Examples = 10
	}
}

func (c *ReconcilerConfig) validate() error {
	switch {
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("reconcile interval: must be at least 10ms, got %s", c.Interval)
	case c.PendingGrace < 0:
		return fmt.Errorf("reconcile pending grace: must not be negative, got %s", c.PendingGrace)
	case c.DueGrace < 0:
		return fmt.Errorf("reconcile due grace: must not be negative, got %s", c.DueGrace)
	case c.MaxAge < c.Schedule.Total():
		return fmt.Errorf("reconcile max age: must be at least the retry schedule's total (%s), got %s", c.Schedule.Total(), c.MaxAge)
	case c.Examples < 0:
		return fmt.Errorf("reconcile examples: must not be negative, got %d", c.Examples)
	}
	return nil
}

// ReconcilerDeps are what the Reconciler works with.
type ReconcilerDeps struct {
	Store  *store.Store
	Logger *slog.Logger
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Clock is the time source. Defaults to clock.System{}.
	Clock clock.Clock
}

// Reconciler is the reconciliation role.
type Reconciler struct {
	cfg           ReconcilerConfig
	deps          ReconcilerDeps
	overdue       prometheus.Gauge
	oldestPending prometheus.Gauge
	open          *prometheus.GaugeVec
	errors        prometheus.Counter
}

// NewReconciler checks cfg and registers the metrics.
func NewReconciler(cfg ReconcilerConfig, deps ReconcilerDeps) (*Reconciler, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkDeps("reconcile", deps.Store, deps.Logger, deps.Registerer, &deps.Clock); err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, deps: deps,
		overdue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_deliveries_overdue",
			Help: "Deliveries non-terminal for longer than their schedule allows, as of the last reconciliation.",
		}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_delivery_oldest_pending_age_seconds",
			Help: "Age of the oldest delivery still pending (never attempted); 0 when none.",
		}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookd_deliveries_open",
			Help: "Non-terminal deliveries by status (pending, retrying), as of the last reconciliation.",
		}, []string{"status"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_reconcile_errors_total",
			Help: "Reconciliation passes that failed.",
		}),
	}
	if err := register("reconcile", deps.Registerer, r.overdue, r.oldestPending, r.open, r.errors); err != nil {
		return nil, err
	}
	return r, nil
}

// Name is the role's name in logs.
func (r *Reconciler) Name() string { return "reconcile" }

// Run checks at once, then every Interval, until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	return everyInterval(ctx, r.cfg.Interval, r.deps.Logger, "reconciliation", r.errors, r.check)
}

func (r *Reconciler) check(ctx context.Context) error {
	now := r.deps.Clock.Now()
	rep, err := r.deps.Store.OverdueDeliveries(ctx, store.OverdueParams{
		Now: now, PendingGrace: r.cfg.PendingGrace, DueGrace: r.cfg.DueGrace, MaxAge: r.cfg.MaxAge, Limit: r.cfg.Examples,
	})
	if err != nil {
		return err
	}
	r.overdue.Set(float64(rep.Count))
	if rep.Count > 0 {
		examples := make([]string, 0, len(rep.Oldest))
		for _, d := range rep.Oldest {
			examples = append(examples, fmt.Sprintf("%s (endpoint %s, %s, %d attempts, created %s)",
				d.ID, d.EndpointID, d.Status, d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339)))
		}
		r.deps.Logger.WarnContext(ctx, "deliveries overdue: non-terminal longer than their schedule allows",
			"count", rep.Count, "oldest", examples,
			"pending_grace", r.cfg.PendingGrace, "due_grace", r.cfg.DueGrace, "max_age", r.cfg.MaxAge)
	}
	b, err := r.deps.Store.GetDeliveryBacklog(ctx)
	if err != nil {
		return err
	}
	r.open.WithLabelValues("pending").Set(float64(b.Pending))
	r.open.WithLabelValues("retrying").Set(float64(b.Retrying))
	age := 0.0
	if !b.OldestPending.IsZero() {
		age = max(now.Sub(b.OldestPending).Seconds(), 0)
	}
	r.oldestPending.Set(age)
	return nil
}

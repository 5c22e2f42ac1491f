package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/store"
	"github.com/prometheus/client_golang/prometheus"
)

// everyInterval is the loop the periodic roles share: pass runs at once,
// then every interval until ctx ends (Run returns nil then). A failed pass
// is counted in failures and logged as one WARN naming what failed; the
// next interval tries again.
func everyInterval(ctx context.Context, interval time.Duration, logger *slog.Logger, what string,
	failures prometheus.Counter, pass func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			failures.Inc()
			logger.WarnContext(ctx, what+" failed; retrying at the next interval", "error", err, "retry_in", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkDeps refuses a role without its store, logger or registerer, and
// gives it the wall clock when it has none.
func checkDeps(what string, st *store.Store, logger *slog.Logger, reg prometheus.Registerer, c *clock.Clock) error {
	if st == nil || logger == nil || reg == nil {
		return fmt.Errorf("%s: store, logger and registerer are required", what)
	}
	if *c == nil {
		*c = clock.System{}
	}
	return nil
}

// register registers a role's metrics.
func register(what string, reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering %s metrics: %w", what, err)
		}
	}
	return nil
}

package maintenance

import (
	"context"
	"log/slog"
	"time"

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

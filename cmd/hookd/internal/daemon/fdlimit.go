package daemon

import (
	"context"
	"errors"
)

// fdReserve is how many descriptors beyond --listen-max-conns a process
// should have for everything else: Kafka, Postgres, receivers, the
// embedded broker's clients and data files.
const fdReserve = 1024

// raiseFileLimit raises the soft open-file limit to the hard one, so that
// no client of --listen, nor a burst of deliveries, meets a lower limit
// than the operator allowed, and says when the listener's cap does not
// leave fdReserve descriptors for the rest.
func (p *process) raiseFileLimit(ctx context.Context) {
	soft, hard, err := raiseFileLimit()
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if err != nil {
		p.logger.WarnContext(ctx, "open-file limit not raised", "soft", soft, "hard", hard, "error", err)
	} else {
		p.logger.InfoContext(ctx, "open-file limit", "soft", soft, "hard", hard)
	}
	httpCfg := p.cfg.HTTP
	httpCfg.SetDefaults()
	if soft < uint64(httpCfg.MaxConns)+fdReserve {
		p.logger.WarnContext(ctx, "open-file limit is low for --listen-max-conns: raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower --listen-max-conns",
			"limit", soft, "listen_max_conns", httpCfg.MaxConns, "reserve", fdReserve)
	}
}

// Command hookbench is hookd's end-to-end benchmark: the real binaries, real
// Postgres, an open-loop load generator, receivers on 127.0.0.1 (https by
// default, --scheme) and three baselines measured in the same run (see
// docs/benchmarks.md). `make bench` runs it against a throwaway Postgres.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hookd/hookd/bench/internal/hookbench"
)

const phaseHelp = "saturation (with it latency, scaleout, b0, b1, b2 and the further --postgres settings), latency, scaleout, b0, b1, b2, isolation, tenancy, memory, onehost (1,000 endpoints on one receiver: connections and TLS handshakes per 1,000 deliveries), burst (10 bursts of 30,000 events to 200 healthy endpoints: time to the last delivery, deferrals)"

func main() {
	var cfg hookbench.Config
	var skip, phases, mem, pg string
	flag.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("DATABASE_URL"), "Postgres server (wal_level=logical) to create benchmark databases on (DATABASE_URL)")
	flag.StringVar(&cfg.OutboxDatabaseURL, "outbox-database-url", "", "a second Postgres server (wal_level=logical) for the application's outbox: the generator commits outbox events there and the relay streams from it, the other roles use --database-url (default: none, one server)")
	flag.StringVar(&cfg.Out, "out", "bench-results", "directory for results.md, results.json, throughput.png and latency_cdf.png")
	flag.IntVar(&cfg.Endpoints, "endpoints", 1000, "receiver endpoints, one account each")
	flag.IntVar(&cfg.Receivers, "receivers", 4, "receiver servers on 127.0.0.1")
	flag.DurationVar(&cfg.Latency, "latency", 5*time.Millisecond, "receivers' answer time")
	flag.Float64Var(&cfg.FailRate, "fail-rate", 0, "share of webhook-ids answered 503 on their first attempt")
	flag.Float64Var(&cfg.OfferedRate, "offered-rate", 15000, "events/s offered in the saturation phase (must exceed capacity)")
	flag.DurationVar(&cfg.Saturation, "saturation", 30*time.Second, "length of the saturation load")
	flag.DurationVar(&cfg.Phase, "phase", 20*time.Second, "length of each latency, isolation and baseline phase")
	flag.Float64Var(&cfg.LatencySaturation, "latency-saturation", 0, "deliveries/s the latency phases offer 50% and 90% of, instead of the saturation rate this run measured (0): to compare two builds at the same load")
	flag.IntVar(&cfg.Dispatchers, "dispatchers", 1, "hookd dispatch processes")
	flag.IntVar(&cfg.Partitions, "partitions", 6, "partitions of the hookd topics")
	flag.Float64Var(&cfg.OutboxShare, "outbox-share", 0.5, "share of events written through the outbox (the rest to the ingress topic)")
	flag.Float64Var(&cfg.IsolationRate, "isolation-rate", 1000, "events/s of the isolation phase (100 endpoints, one hanging in the second run)")
	flag.IntVar(&cfg.InsertBatch, "insert-batch", 1000, "events per application transaction, the same for both systems: outbox rows per transaction and records per ingress batch in the saturation phase, River jobs per InsertManyFast in B2")
	flag.IntVar(&cfg.RiverJobs, "river-jobs", 40000, "deliveries the River baseline (B2) makes")
	flag.Float64Var(&cfg.TenancyAbuseRate, "tenancy-abuse-rate", 100, "events/s of the abusive account in the tenancy phase (100 healthy accounts at --isolation-rate next to it)")
	flag.IntVar(&cfg.TenancyAbusiveEndpoints, "tenancy-abusive-endpoints", 8, "hanging endpoints of the abusive account (max_in_flight 100000, timeout_ms 60000 stored)")
	flag.StringVar(&pg, "postgres", "durable,fsync-off", "Postgres settings, comma-separated, the first the headline (every phase), each further one B2 and saturation again: durable (fsync=on, synchronous_commit=on), fsync-off, as-is (the server's own settings, no ALTER SYSTEM); hookbench sets them with ALTER SYSTEM and puts them back at the end")
	flag.IntVar(&cfg.ScaleOutDispatchers, "scaleout-dispatchers", 3, "dispatch processes of the scale-out phase (saturation again on a fresh stack, against --dispatchers); negative skips it")
	flag.StringVar(&mem, "memory-endpoints", "10000,100000", "endpoint counts of the memory phase")
	flag.StringVar(&cfg.Scheme, "scheme", hookbench.SchemeHTTPS, "receivers' scheme: https (a CA generated for the run; hookd and river-sender trust it through SSL_CERT_FILE, B0 and B1 through their client's RootCAs; HTTP/2 and HTTP/1.1 offered over ALPN) or http (the runs before issue 28)")
	flag.BoolVar(&cfg.EndpointFeatures, "endpoint-features", false, "give every endpoint two custom headers and a payload filter all the load's events match (to compare the throughput with and without)")
	flag.IntVar(&cfg.BurstEndpoints, "burst-endpoints", 200, "healthy endpoints (one account each) of the burst phase")
	flag.IntVar(&cfg.BurstEvents, "burst-events", 30000, "events committed at once in each run of the burst phase")
	flag.IntVar(&cfg.BurstRuns, "burst-runs", 10, "runs of the burst phase")
	flag.IntVar(&cfg.OneHostEndpoints, "onehost-endpoints", 1000, "endpoints (one account each) on the single receiver of the onehost phase")
	flag.Float64Var(&cfg.OneHostRate, "onehost-rate", 1000, "events/s of the onehost phase (warm-up and measured load)")
	flag.DurationVar(&cfg.OneHostWarmup, "onehost-warmup", 5*time.Second, "load of the onehost phase before connections and handshakes are counted (the measured load lasts --phase)")
	flag.StringVar(&skip, "skip", "", "phases to skip, comma-separated: "+phaseHelp)
	flag.StringVar(&phases, "phases", "", "phases to run, comma-separated (the others are skipped; default all): "+phaseHelp)
	flag.Parse()
	var err error
	if cfg.Postgres, err = hookbench.ParsePostgresModes(pg); err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(2)
	}
	if cfg.Skip, err = hookbench.ParseSkip(skip, phases); err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(2)
	}
	for _, s := range strings.Split(mem, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err == nil && n > 0 {
			cfg.MemoryEndpoints = append(cfg.MemoryEndpoints, n)
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := hookbench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(1)
	}
	fmt.Print(res.Markdown())
	fmt.Fprintf(os.Stderr, "hookbench: results in %s/ (results.md, results.json, throughput.png, latency_cdf.png)\n", cfg.Out)
}

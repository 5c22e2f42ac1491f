// Package daemon composes a hookd process: it starts the embedded broker when
// no brokers are given, opens and migrates Postgres, checks Kafka and
// provisions topics, serves HTTP, then runs the requested roles (relay,
// router, dispatcher, attempt-log writer, ...) until the context ends, and
// drains them. It owns start-up order and shutdown order, never a role's
// logic.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/embedded"
	"github.com/hookd/hookd/httpapi"
	"github.com/hookd/hookd/kafkaconn"
	"github.com/hookd/hookd/replay"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/topics"
)

// Role is one long-running part of hookd. Run returns when ctx ends, after
// draining its in-flight work, or earlier with an error.
type Role interface {
	Name() string
	Run(ctx context.Context) error
}

// Env is what roles are built from.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Store    *store.Store
	// KafkaOpts are the shared client options (seeds, logging), without
	// metrics; roles use KafkaOptsFor.
	KafkaOpts []kgo.Opt
	Topics    topics.Config
	Names     topics.Names
}

// KafkaOptsFor returns the shared client options plus the client metrics
// of one named client (label client=<name>). Give every client its own name.
func (e *Env) KafkaOptsFor(client string) []kgo.Opt {
	return append(slices.Clip(e.KafkaOpts), kgo.WithHooks(kafkaconn.MetricsHook(e.Registry, client)))
}

// RoleFactory builds a role once the environment is up.
type RoleFactory func(ctx context.Context, env *Env) (Role, error)

// Config configures a hookd process.
type Config struct {
	// Embedded, when non-nil, starts the in-process broker and points Kafka
	// at it. Nil means Kafka.Brokers are used and nothing is embedded.
	Embedded *embedded.Config
	Kafka    kafkaconn.Config
	Postgres store.Config
	Topics   topics.Config
	HTTP     api.Config
	// Migrate applies the schema at start-up. Defaults to false here; the
	// CLI turns it on unless --no-migrate.
	Migrate bool
	// AttemptRetention drops attempt-log partitions older than this.
	// Defaults to 30 days.
	AttemptRetention time.Duration
	// StartupTimeout bounds each start-up check (Postgres, Kafka).
	// Defaults to 10s.
	StartupTimeout time.Duration
	// AdminToken is the bearer token with access to every account on the
	// /v1 API. Defaults to "" (admin access off; account tokens still work).
	AdminToken string
}

func (c *Config) setDefaults() {
	if c.AttemptRetention == 0 {
		c.AttemptRetention = 30 * 24 * time.Hour
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = 10 * time.Second
	}
	c.Topics.SetDefaults()
	c.Kafka.SetDefaults()
}

func (c *Config) validate() error {
	if c.Embedded == nil {
		if err := c.Kafka.Validate(); err != nil {
			return err
		}
	}
	if err := c.Topics.Validate(); err != nil {
		return err
	}
	if c.AttemptRetention < 24*time.Hour {
		return fmt.Errorf("attempt retention: must be at least 24h, got %s", c.AttemptRetention)
	}
	if _, err := store.ParsePoolConfig(c.Postgres); err != nil {
		return err
	}
	return nil
}

// StartupError is a problem found before hookd started serving: bad
// configuration, a port in use, an unreachable dependency. The CLI exits 2.
type StartupError struct{ Err error }

func (e *StartupError) Error() string { return e.Err.Error() }
func (e *StartupError) Unwrap() error { return e.Err }

func startup(err error) error { return &StartupError{Err: err} }

// Run starts a hookd process with the given roles and blocks until ctx ends
// or a role fails. Shutdown order: roles drain first, then HTTP stops, then
// the embedded broker closes.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, roles []RoleFactory) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return startup(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	env := &Env{Logger: logger, Registry: reg, Topics: cfg.Topics, Names: topics.NamesFor(cfg.Topics)}
	var kafkaClient *kgo.Client
	checks := map[string]api.Check{
		"postgres": func(ctx context.Context) error {
			if env.Store == nil {
				return errors.New("not connected")
			}
			return env.Store.Ping(ctx)
		},
		"kafka": func(ctx context.Context) error {
			if kafkaClient == nil {
				return errors.New("not connected")
			}
			_, err := kadm.NewClient(kafkaClient).BrokerMetadata(ctx)
			return err
		},
	}
	// 1. Bind HTTP first: a port in use is the quickest thing to report.
	jsonAPI := httpapi.New(httpapi.Config{AdminToken: cfg.AdminToken}, logger.With("component", "api"))
	srv, err := api.Listen(cfg.HTTP, api.Deps{Logger: logger, Gatherer: reg, Checks: checks, Routes: jsonAPI.Routes})
	if err != nil {
		return startup(err)
	}
	defer srv.Close()

	// 2. The embedded broker, when asked for.
	if cfg.Embedded != nil {
		b, err := embedded.Start(ctx, *cfg.Embedded, logger)
		if err != nil {
			return startup(err)
		}
		defer func() {
			b.Close()
			logger.Info("embedded kafka stopped")
		}()
		cfg.Kafka.Brokers = b.Addrs()
	}

	// 3. Postgres: reachable, migrated, attempt partitions ahead.
	pgCtx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	st, err := store.Open(pgCtx, cfg.Postgres, logger)
	cancel()
	if err != nil {
		return startup(err)
	}
	defer st.Close()
	env.Store = st
	if cfg.Migrate {
		res, err := st.Migrate(ctx)
		if err != nil {
			return startup(err)
		}
		logger.InfoContext(ctx, "schema migrated", "applied", len(res.Applied), "version", res.Version)
	}
	if _, err := st.MaintainAttemptPartitions(ctx, time.Now(), 3, cfg.AttemptRetention); err != nil {
		return startup(fmt.Errorf("%w (run hookd migrate first?)", err))
	}

	// 4. Kafka: reachable, topics provisioned.
	env.KafkaOpts = kafkaconn.Opts(cfg.Kafka, logger)
	kafkaClient, err = kgo.NewClient(env.KafkaOptsFor("admin")...)
	if err != nil {
		return startup(fmt.Errorf("kafka client: %w", err))
	}
	defer kafkaClient.Close()
	if err := kafkaconn.Check(ctx, kafkaClient, cfg.Kafka.Brokers, cfg.StartupTimeout); err != nil {
		return startup(err)
	}
	reg.MustRegister(kafkaconn.NewGroupCollector(kafkaClient, kafkaconn.Groups, 5*time.Second))
	provCtx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	prov, err := topics.Provision(provCtx, kadm.NewClient(kafkaClient), cfg.Topics)
	cancel()
	if err != nil {
		return startup(err)
	}
	// The JSON API answers 503 until here; replays it started stop with ctx
	// and are waited for before Postgres closes.
	jsonAPI.Attach(ctx, httpapi.Backend{Store: st, Replay: replay.Deps{KafkaOpts: env.KafkaOpts, Names: env.Names}})
	defer jsonAPI.Wait()
	logger.InfoContext(ctx, "topics ready", "created", len(prov.Created), "existing", len(prov.Existing), "partitions", cfg.Topics.Partitions)

	// 5. Roles.
	built := make([]Role, 0, len(roles))
	for _, f := range roles {
		r, err := f(ctx, env)
		if err != nil {
			return startup(err)
		}
		built = append(built, r)
	}

	g, gctx := errgroup.WithContext(ctx)
	roleCtx, stopRoles := context.WithCancel(gctx)
	defer stopRoles()
	var rolesDone = make(chan struct{})
	rg, rctx := errgroup.WithContext(roleCtx)
	rg.Go(func() error { <-rctx.Done(); return nil }) // a process with no roles still serves HTTP
	for _, r := range built {
		rg.Go(func() error {
			logger.InfoContext(rctx, "role started", "role", r.Name())
			if err := r.Run(rctx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("%s: %w", r.Name(), err)
			}
			logger.InfoContext(rctx, "role stopped", "role", r.Name())
			return nil
		})
	}
	g.Go(func() error {
		defer close(rolesDone)
		return rg.Wait()
	})
	g.Go(func() error {
		// HTTP outlives the roles so /metrics answers while they drain.
		httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
		defer stopHTTP()
		go func() {
			<-rolesDone
			stopHTTP()
		}()
		return srv.Run(httpCtx)
	})
	logger.InfoContext(ctx, "hookd ready", "roles", len(built), "brokers", cfg.Kafka.Brokers)
	err = g.Wait()
	if err != nil {
		return err
	}
	logger.Info("hookd stopped")
	return nil
}

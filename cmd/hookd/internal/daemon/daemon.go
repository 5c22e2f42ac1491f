// Package daemon composes a hookd process: it starts the embedded broker when
// no brokers are given, opens and migrates Postgres, checks Kafka and
// provisions topics, serves HTTP, then runs the requested roles (relay,
// router, dispatcher, attempt-log writer, ...) until the context ends, and
// drains them. It owns start-up order and shutdown order, never a role's
// logic.
//
// Internal: only hookd's own packages can import it.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/api/portal"
	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/drain"
	"github.com/hookd/hookd/internal/embedded"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/internal/version"
	"github.com/hookd/hookd/store"
)

// Role is one long-running part of hookd. Run returns when ctx ends, after
// draining its in-flight work, or earlier with an error.
type Role interface {
	Name() string
	Run(ctx context.Context) error
}

// Readier is a Role that can run yet not do its job (the relay, stalled):
// /readyz asks it, under "roles", and reports its error.
type Readier interface {
	Ready(ctx context.Context) error
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
	// Tracing is the process's tracer provider, from the OTEL_* environment
	// (off unless it asks for traces); roles use Tracer.
	Tracing *tracing.Provider
}

// Tracer returns the named tracer of the process: a no-op one when tracing
// is off.
func (e *Env) Tracer(name string) trace.Tracer { return e.Tracing.Tracer(name) }

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
	// API.AdminToken, when set, wins.
	AdminToken string
	// API configures the /v1 JSON API (its own defaults apply).
	API api.V1Config
	// Portal configures the delivery portal under /portal/ (its own
	// defaults apply); the admin token, the endpoint limits and the
	// private-network setting come from AdminToken and API.
	Portal portal.Config
	// KafkaProbe configures the Kafka outage monitor that feeds /readyz
	// and the hookd_kafka_reachable metrics (its own defaults apply: a
	// probe every second, unreachable after two failures in a row).
	KafkaProbe kafkaconn.MonitorConfig
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
	p := &process{cfg: cfg, logger: logger}
	p.raiseFileLimit(ctx)
	defer p.close()
	if err := p.start(ctx); err != nil {
		return startup(err)
	}
	built, err := p.buildRoles(ctx, roles)
	if err != nil {
		return startup(err)
	}
	logger.InfoContext(ctx, "hookd ready", "roles", len(built), "brokers", p.cfg.Kafka.Brokers)
	if err := p.serve(ctx, built); err != nil {
		return err
	}
	logger.Info("hookd stopped")
	return nil
}

// process is one hookd process being started, run and stopped. close
// undoes, in reverse order, whatever start got to.
type process struct {
	cfg     Config
	logger  *slog.Logger
	env     *Env
	srv     *api.Server
	jsonAPI *api.V1
	portal  *portal.Handler
	kafka   *kafkaconn.Monitor
	broker  *embedded.Broker
	roles   rolesState
	closers []func()
}

// rolesState is the roles' part of readiness: nil while they all run, why
// not otherwise (not started yet, one stopped or failed, shutting down).
type rolesState struct {
	mu  sync.Mutex
	err error
	// readiers are the running roles that have a readiness of their own.
	readiers []Role
}

// run records that roles run: ready unless one of them says otherwise.
func (s *rolesState) run(roles []Role) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.readiers = nil, nil
	for _, r := range roles {
		if _, ok := r.(Readier); ok {
			s.readiers = append(s.readiers, r)
		}
	}
}

func (s *rolesState) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// fail records the first reason the roles stopped serving.
func (s *rolesState) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *rolesState) check(ctx context.Context) error {
	s.mu.Lock()
	err, readiers := s.err, s.readiers
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for _, r := range readiers {
		if err := r.(Readier).Ready(ctx); err != nil {
			return fmt.Errorf("%s: %w", r.Name(), err)
		}
	}
	return nil
}

func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// start brings up, in order: HTTP (a port in use is the quickest thing to
// report), the embedded broker when asked for, Postgres, then Kafka and the
// topics. The JSON API answers 503 until the end of it.
func (p *process) start(ctx context.Context) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.env = &Env{Logger: p.logger, Registry: reg, Topics: p.cfg.Topics, Names: topics.NamesFor(p.cfg.Topics)}
	for _, step := range []func(context.Context) error{p.startTracing, p.startHTTP, p.startBroker, p.openStore, p.connectKafka} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	// Replays the JSON API starts stop with ctx and are waited for before
	// Postgres closes.
	replayDeps := replay.Deps{KafkaOpts: p.env.KafkaOpts, Names: p.env.Names}
	p.jsonAPI.Attach(ctx, api.Backend{Store: p.env.Store, Replay: replayDeps})
	p.onClose(p.jsonAPI.Wait)
	p.portal.Attach(ctx, portal.Backend{Store: p.env.Store, Replay: replayDeps})
	p.onClose(p.portal.Wait)
	return nil
}

// startTracing sets up the tracer provider the OTEL_* environment asks
// for. Closed last, after the roles drained: the spans of their last
// records are flushed, for up to tracingFlush.
func (p *process) startTracing(ctx context.Context) error {
	prov, err := tracing.Setup(ctx, p.logger)
	if err != nil {
		return err
	}
	p.env.Tracing = prov
	p.onClose(func() {
		fctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := prov.Shutdown(fctx); err != nil {
			p.logger.Warn("tracing: spans not flushed at shutdown", "error", err.Error())
		}
	})
	return nil
}

// tracingFlush bounds the export of the spans buffered at shutdown.
const tracingFlush = 5 * time.Second

func (p *process) startHTTP(context.Context) error {
	apiCfg := p.cfg.API
	if apiCfg.AdminToken == "" {
		apiCfg.AdminToken = p.cfg.AdminToken
	}
	if apiCfg.PortalBaseURL == "" {
		apiCfg.PortalBaseURL = p.cfg.Portal.BaseURL // portal links start with it
	}
	p.jsonAPI = api.NewV1(apiCfg, p.logger.With("component", "api"))
	pcfg := p.cfg.Portal
	pcfg.AdminToken, pcfg.AllowPrivateNetworks = apiCfg.AdminToken, apiCfg.AllowPrivateNetworks
	if pcfg.RequestTimeout == 0 {
		pcfg.RequestTimeout = apiCfg.MaxTimeout
	}
	var err error
	if p.portal, err = portal.New(pcfg, portal.Deps{Logger: p.logger.With("component", "portal"),
		ReplaySlots: p.jsonAPI}); err != nil {
		return err
	}
	routes := func(mux *http.ServeMux) {
		p.jsonAPI.Routes(mux)
		p.portal.Routes(mux)
	}
	srv, err := api.Listen(p.httpConfig(apiCfg), api.Deps{Logger: p.logger, Gatherer: p.env.Registry, Registerer: p.env.Registry,
		Checks: p.checks(), Routes: routes})
	if err != nil {
		return err
	}
	p.srv = srv
	p.onClose(func() { srv.Close() })
	return nil
}

// httpConfig is the listener's configuration; its body limit, unless set,
// lets through the largest body a handler accepts.
func (p *process) httpConfig(apiCfg api.V1Config) api.Config {
	cfg := p.cfg.HTTP
	if cfg.MaxBodyBytes == 0 {
		apiCfg.SetDefaults()
		cfg.MaxBodyBytes = max(apiCfg.MaxBodyBytes, api.DefaultMaxBodyBytes)
	}
	return cfg
}

// checks are the readiness checks: each dependency as it is now, and the
// roles. Kafka's is the outage monitor's state, read at once.
func (p *process) checks() map[string]api.Check {
	p.roles.set(errors.New("starting"))
	return map[string]api.Check{
		"roles": p.roles.check,
		"postgres": func(ctx context.Context) error {
			if p.env.Store == nil {
				return errors.New("not connected")
			}
			return p.env.Store.Ping(ctx)
		},
		"kafka": func(ctx context.Context) error {
			if p.kafka == nil {
				return errors.New("not connected")
			}
			// The monitor's client keeps its connections to the embedded
			// broker open: it cannot see a broker that refuses new ones.
			if p.broker != nil {
				if err := p.broker.Err(); err != nil {
					return err
				}
			}
			return p.kafka.Err()
		},
	}
}

func (p *process) startBroker(ctx context.Context) error {
	if p.cfg.Embedded == nil {
		return nil
	}
	b, err := embedded.Start(ctx, *p.cfg.Embedded, p.logger)
	if err != nil {
		return err
	}
	p.onClose(func() {
		b.Close()
		p.logger.Info("embedded kafka stopped")
	})
	p.cfg.Kafka.Brokers = b.Addrs()
	p.broker = b
	return nil
}

// openStore connects Postgres, migrates it when asked, and makes sure the
// attempt partitions exist ahead of any writer.
func (p *process) openStore(ctx context.Context) error {
	pgCtx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout)
	st, err := store.Open(pgCtx, p.cfg.Postgres, p.logger)
	cancel()
	if err != nil {
		return err
	}
	p.onClose(st.Close)
	p.env.Store = st
	if p.cfg.Migrate {
		res, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		p.logger.InfoContext(ctx, "schema migrated", "applied", len(res.Applied), "version", res.Version)
	}
	if _, err := st.MaintainAttemptPartitions(ctx, time.Now(), 3, p.cfg.AttemptRetention); err != nil {
		return fmt.Errorf("%w (run hookd migrate first?)", err)
	}
	return p.checkSecretKeys(ctx, st)
}

// checkSecretKeys refuses to start when signing secrets are encrypted with
// a key this process was not given: every role of every process reads
// endpoints (the API at least), and would otherwise fail on each of them.
// It says what is left to encrypt.
func (p *process) checkSecretKeys(ctx context.Context, st *store.Store) error {
	at, err := st.CheckSecretKeys(ctx)
	if errors.Is(err, store.ErrSecretsKey) {
		return fmt.Errorf("%w: give every key still in use in HOOKD_SECRETS_KEY or --secrets-key-file (docs/operations.md, Secrets at rest)", err)
	}
	if err != nil {
		return err
	}
	ring := p.cfg.Postgres.Secrets
	if ring == nil {
		return nil
	}
	older := 0
	for id, n := range at.ByKey {
		if id != ring.CurrentID() {
			older += n
		}
	}
	if at.Plain > 0 || older > 0 {
		p.logger.InfoContext(ctx, "signing secrets not yet under the current key: run hookd secrets rotate-key once every process has it",
			"plain_text", at.Plain, "older_keys", older, "current_key", ring.CurrentID())
	}
	return nil
}

// connectKafka checks the brokers answer and provisions the topics.
func (p *process) connectKafka(ctx context.Context) error {
	p.env.KafkaOpts = kafkaconn.Opts(p.cfg.Kafka, p.logger)
	dials := &kafkaconn.DialErrors{}
	cl, err := kgo.NewClient(append(p.env.KafkaOptsFor("admin"), kgo.WithHooks(dials))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	p.onClose(cl.Close)
	if err := kafkaconn.Check(ctx, cl, p.cfg.Kafka.Brokers, p.cfg.StartupTimeout); err != nil {
		return err
	}
	if err := p.monitorKafka(ctx, cl, dials); err != nil {
		return err
	}
	p.env.Registry.MustRegister(kafkaconn.NewGroupCollector(cl, kafkaconn.Groups, 5*time.Second))
	provCtx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout)
	prov, err := topics.Provision(provCtx, kadm.NewClient(cl), p.cfg.Topics)
	cancel()
	if err != nil {
		return err
	}
	for _, w := range prov.Warnings {
		p.logger.WarnContext(ctx, "topic check", "warning", w)
	}
	p.logger.InfoContext(ctx, "topics ready", "created", len(prov.Created), "existing", len(prov.Existing), "partitions", p.cfg.Topics.Partitions)
	p.recordInstallation(ctx)
	return nil
}

// monitorKafka starts the process's one Kafka outage monitor on the admin
// client; it runs until the process closes, through the roles' drain.
func (p *process) monitorKafka(ctx context.Context, cl *kgo.Client, dials *kafkaconn.DialErrors) error {
	m, err := kafkaconn.NewMonitor(p.cfg.KafkaProbe, kafkaconn.MonitorDeps{Client: cl, Dials: dials, Logger: p.logger, Registerer: p.env.Registry})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(mctx) // returns nil when mctx ends
	}()
	p.onClose(func() { cancel(); <-done })
	p.kafka = m
	return nil
}

// recordInstallation writes the topic layout (prefix, partitions, retry
// schedule, tier topics) to Postgres, where hookctl reads it. It only
// informs hookctl: a failure is logged, not fatal.
func (p *process) recordInstallation(ctx context.Context) {
	cfg := p.cfg.Topics
	cfg.SetDefaults()
	in := store.Installation{TopicPrefix: cfg.Prefix, Partitions: cfg.Partitions, RetrySchedule: cfg.Schedule.String(),
		TierTopics: topics.NamesFor(cfg).Retry, WrittenBy: "hookd " + version.Version}
	if err := p.env.Store.RecordInstallation(ctx, in); err != nil {
		p.logger.WarnContext(ctx, "installation not recorded: hookctl needs --retry-schedule", "error", err)
	}
}

func (p *process) buildRoles(ctx context.Context, factories []RoleFactory) ([]Role, error) {
	built := make([]Role, 0, len(factories))
	for _, f := range factories {
		r, err := f(ctx, p.env)
		if err != nil {
			return nil, err
		}
		built = append(built, r)
	}
	return built, nil
}

// ErrRoleStopped is wrapped by Run's error when a role returned before
// shutdown without an error: a process that silently lost a role must not
// keep reporting ready.
var ErrRoleStopped = errors.New("stopped on its own before shutdown")

// serve runs the roles until ctx ends or one of them stops, then drains
// them; HTTP outlives the roles so /metrics answers while they drain.
func (p *process) serve(ctx context.Context, roles []Role) error {
	roleCtx, stopRoles := context.WithCancel(ctx)
	defer stopRoles()
	rolesDone := make(chan error, 1)
	p.roles.run(roles)
	stopping := context.AfterFunc(ctx, func() { p.roles.fail(errors.New("shutting down")) })
	defer stopping()
	go func() { rolesDone <- p.runRoles(roleCtx, roles) }()

	httpCtx, stopHTTP := drain.Context(ctx, 0)
	defer stopHTTP()
	httpDone := make(chan error, 1)
	go func() { httpDone <- p.srv.Run(httpCtx) }()

	var err error
	select {
	case err = <-rolesDone:
	case err = <-httpDone:
		stopRoles()
		if rerr := <-rolesDone; err == nil {
			err = rerr
		}
		return err
	}
	stopHTTP()
	if herr := <-httpDone; err == nil {
		err = herr
	}
	return err
}

// runRoles runs every role until ctx ends; the first to fail, or to return
// early, stops the others.
func (p *process) runRoles(ctx context.Context, roles []Role) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range roles {
		g.Go(func() error {
			p.logger.InfoContext(gctx, "role started", "role", r.Name())
			err := r.Run(gctx)
			switch {
			case err != nil && !errors.Is(err, context.Canceled):
				err = fmt.Errorf("%s: %w", r.Name(), err)
			case gctx.Err() == nil:
				err = fmt.Errorf("%s: %w", r.Name(), ErrRoleStopped)
			default:
				err = nil
			}
			if err != nil {
				// Not ready from now on, while the other roles drain;
				// the CLI prints err once the process has stopped.
				p.roles.fail(err)
				return err
			}
			p.logger.InfoContext(gctx, "role stopped", "role", r.Name())
			return nil
		})
	}
	g.Go(func() error { <-gctx.Done(); return nil }) // a process with no roles still serves HTTP
	return g.Wait()
}

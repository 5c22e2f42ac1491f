package cli

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/producer/relay"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store/attemptlog"
	"github.com/hookd/hookd/store/maintenance"
)

// RelayFlags configure the outbox CDC relay.
type RelayFlags struct {
	RelaySlot         string        `name:"relay-slot" default:"hookd_relay" env:"HOOKD_RELAY_SLOT" help:"Logical replication slot of the outbox relay (cluster-wide: one per hookd installation)."`
	RelayPublication  string        `name:"relay-publication" default:"hookd_outbox" env:"HOOKD_RELAY_PUBLICATION" help:"Publication of the outbox table the relay streams."`
	RelayStallTimeout time.Duration `name:"relay-stall-timeout" default:"2m" env:"HOOKD_RELAY_STALL_TIMEOUT" help:"How long outbox rows may wait with the relay making no progress before /readyz answers 503 with the reason."`
}

// EnvelopeFlags bound an event's size; the relay and the router share them.
type EnvelopeFlags struct {
	MaxEnvelopeBytes int `name:"max-envelope-bytes" default:"262144" env:"HOOKD_MAX_ENVELOPE_BYTES" help:"Largest event envelope in bytes (1024..983040): larger events are dead-lettered (reason oversize) by the relay and the router. The outbox's insert-time limit stays 255 KiB of payload."`
}

func (f EnvelopeFlags) validate() error {
	if f.MaxEnvelopeBytes < 1024 || f.MaxEnvelopeBytes > 960<<10 {
		return fmt.Errorf("--max-envelope-bytes: must be between 1024 and %d, got %d", 960<<10, f.MaxEnvelopeBytes)
	}
	return nil
}

// RouterFlags configure the router's exactly-once fan-out and ingress
// dedupe.
type RouterFlags struct {
	DedupeWindow        time.Duration `name:"dedupe-window" default:"1h" env:"HOOKD_DEDUPE_WINDOW" help:"An event repeated on the events topic (same account and id, same partition) within this long of the first copy's record timestamp is dropped, not delivered again (1m..168h)."`
	DedupeMaxKeys       int           `name:"dedupe-max-keys" default:"50000" env:"HOOKD_DEDUPE_MAX_KEYS" help:"Events remembered per events partition for --dedupe-window (about 80 bytes each); past it the oldest are forgotten first (at least 1000)."`
	TransactionInterval time.Duration `name:"transaction-interval" default:"20ms" env:"HOOKD_TRANSACTION_INTERVAL" help:"Start a transaction at most this often; events arriving meanwhile join it. Fewer transactions cost Kafka fewer requests, at up to this much latency (0..1s; 0 starts each as soon as the last ends)."`
	TransactionalID     string        `name:"transactional-id" env:"HOOKD_TRANSACTIONAL_ID" help:"Kafka transactional id of this router: unique per running router, the same across its restarts. Default: hookd-router-<host name>."`
	// ValidateEventSchemas is off by default: validation costs a parse of
	// every event's data, and a catalogue schema written in haste would
	// dead-letter real traffic.
	ValidateEventSchemas bool `name:"validate-event-schemas" env:"HOOKD_VALIDATE_EVENT_SCHEMAS" help:"Validate each event's data against its type's JSON Schema in the event-type catalogue (/v1/event-types); an event that does not match is dead-lettered with reason schema_violation. Types without a schema, or not in the catalogue, pass."`
}

// transactionInterval is --transaction-interval as router.Config takes it,
// where 0 means the default and a negative value none.
func (f RouterFlags) transactionInterval() time.Duration {
	if f.TransactionInterval == 0 {
		return -1
	}
	return f.TransactionInterval
}

func (f RouterFlags) validate() error {
	switch {
	case f.DedupeWindow < time.Minute || f.DedupeWindow > router.MaxDedupeWindow:
		return fmt.Errorf("--dedupe-window: must be between 1m and %s, got %s", router.MaxDedupeWindow, f.DedupeWindow)
	case f.DedupeMaxKeys < 1000:
		return fmt.Errorf("--dedupe-max-keys: must be at least 1000, got %d", f.DedupeMaxKeys)
	case f.TransactionInterval < 0 || f.TransactionInterval > time.Second:
		return fmt.Errorf("--transaction-interval: must be between 0 and 1s, got %s", f.TransactionInterval)
	}
	return nil
}

// EndpointLimitFlags bound what an account may set on its endpoints: the
// API refuses values beyond them, and the dispatcher applies them to every
// request whatever is stored. `hookd run`, `hookd dispatch` and `hookd
// api` read them; give every process the same values.
type EndpointLimitFlags struct {
	MaxEndpointInFlight  int           `name:"max-endpoint-in-flight" default:"64" env:"HOOKD_MAX_ENDPOINT_IN_FLIGHT" help:"Largest max_in_flight an endpoint may use: the API refuses more, the dispatcher caps what is stored."`
	RequestTimeout       time.Duration `name:"request-timeout" default:"10s" env:"HOOKD_REQUEST_TIMEOUT" help:"Total timeout of a webhook request, response included; also the longest timeout_ms an endpoint may set (it may set a shorter one)."`
	AllowPrivateNetworks bool          `name:"allow-private-networks" env:"HOOKD_ALLOW_PRIVATE_NETWORKS" help:"Allow webhook destinations on loopback, private, link-local and metadata addresses, at endpoint creation and at connect time (development and tests only)."`
}

// apiConfig is the /v1 API's endpoint checks from the flags: the same
// limits the dispatcher applies, refused at create and update.
func (f EndpointLimitFlags) apiConfig() (api.V1Config, error) {
	c := api.V1Config{AllowPrivateNetworks: f.AllowPrivateNetworks, MaxEndpointInFlight: f.MaxEndpointInFlight, MaxTimeout: f.RequestTimeout}
	c.SetDefaults()
	return c, c.Validate()
}

func (f EndpointLimitFlags) validate() error {
	switch {
	case f.MaxEndpointInFlight < 1:
		return fmt.Errorf("--max-endpoint-in-flight: must be at least 1, got %d", f.MaxEndpointInFlight)
	case f.RequestTimeout <= 0:
		return fmt.Errorf("--request-timeout: must be positive, got %s", f.RequestTimeout)
	}
	return nil
}

// DispatchFlags configure the dispatcher.
type DispatchFlags struct {
	MaxInFlight         int           `name:"max-in-flight" default:"4" env:"HOOKD_MAX_IN_FLIGHT" help:"Requests in flight per endpoint that sets none (an endpoint may set its own, up to --max-endpoint-in-flight)."`
	Concurrency         int           `name:"concurrency" default:"256" env:"HOOKD_CONCURRENCY" help:"Requests in flight per dispatcher process, all endpoints together; while N accounts are active each may hold max(ceil(concurrency/N), 4), one alone all."`
	EndpointBacklog     int           `name:"endpoint-backlog" default:"1000" env:"HOOKD_ENDPOINT_BACKLOG" help:"Records of one endpoint held waiting for a slot; beyond it, while the endpoint holds its slots without answering (or waits on its rate), they go to the first retry tier without spending an attempt."`
	ConnectTimeout      time.Duration `name:"connect-timeout" default:"3s" env:"HOOKD_CONNECT_TIMEOUT" help:"TCP connect and TLS handshake timeout of a webhook request."`
	BreakerOpenFor      time.Duration `name:"breaker-open-for" default:"30s" env:"HOOKD_BREAKER_OPEN_FOR" help:"How long a tripped endpoint circuit breaker stays open before it lets a probe through; with a short --retry-schedule, keep it shorter than the schedule."`
	BreakerMinRequests  uint32        `name:"breaker-min-requests" default:"20" env:"HOOKD_BREAKER_MIN_REQUESTS" help:"Answers in the breaker's 60s window before it may trip on --breaker-failure-ratio; that many failures in a row trip it however far apart."`
	BreakerFailureRatio float64       `name:"breaker-failure-ratio" default:"0.5" env:"HOOKD_BREAKER_FAILURE_RATIO" help:"Share of failed requests in the window that trips the breaker."`
	LogDeliveries       bool          `name:"log-deliveries" env:"HOOKD_LOG_DELIVERIES" help:"Log one line per delivery attempt (endpoint, event id, status, duration) at info; they are logged at debug anyway (--log-level debug)."`
	EgressProxy         string        `name:"egress-proxy" env:"HOOKD_EGRESS_PROXY" help:"HTTP CONNECT proxy for every webhook request, http://[user:pass@]host:port (fixed egress addresses). The SSRF guard still checks each destination's resolved addresses before CONNECT; the proxy's own address may be private."`
	InstanceID          string        `name:"instance-id" env:"HOOKD_INSTANCE_ID" help:"Static member id in the dispatcher group, unique per process and kept across restarts (e.g. the pod name): a restart after a crash takes the old process's partitions at once instead of stopping every dispatcher for the session timeout. Empty: a dynamic member."`
	EndpointCAFile      string        `name:"endpoint-ca-file" env:"HOOKD_ENDPOINT_CA_FILE" help:"PEM bundle of CA certificates trusted for https endpoints in addition to the system roots (receivers with a private CA; SSL_CERT_FILE replaces the system roots instead)."`
	EndpointLimitFlags
}

func (f DispatchFlags) validate() error {
	if err := f.EndpointLimitFlags.validate(); err != nil {
		return err
	}
	if f.MaxInFlight > f.MaxEndpointInFlight {
		return fmt.Errorf("--max-in-flight: %d is more than --max-endpoint-in-flight %d", f.MaxInFlight, f.MaxEndpointInFlight)
	}
	if _, err := dispatcher.ParseEgressProxy(f.EgressProxy); err != nil {
		return fmt.Errorf("--egress-proxy: %w", err)
	}
	if err := dispatcher.ValidateInstanceID(f.InstanceID); err != nil {
		return fmt.Errorf("--instance-id: %w", err)
	}
	if f.EndpointCAFile != "" {
		if _, err := dispatcher.LoadEndpointCAs(f.EndpointCAFile); err != nil {
			return fmt.Errorf("--endpoint-ca-file: %w", err)
		}
	}
	return nil
}

// dispatcherConfig is the dispatcher's config from the flags.
func (f DispatchFlags) dispatcherConfig(t topics.Config) dispatcher.Config {
	egress, _ := dispatcher.ParseEgressProxy(f.EgressProxy) // checked by validate
	return dispatcher.Config{
		Topics:               t,
		MaxInFlight:          f.MaxInFlight,
		MaxEndpointInFlight:  f.MaxEndpointInFlight,
		Concurrency:          f.Concurrency,
		EndpointBacklog:      f.EndpointBacklog,
		ConnectTimeout:       f.ConnectTimeout,
		Timeout:              f.RequestTimeout,
		AllowPrivateNetworks: f.AllowPrivateNetworks,
		EgressProxy:          egress,
		EndpointCAFile:       f.EndpointCAFile,
		InstanceID:           f.InstanceID,
		LogDeliveries:        f.LogDeliveries,
		Breaker: dispatcher.BreakerConfig{
			OpenFor:      f.BreakerOpenFor,
			MinRequests:  f.BreakerMinRequests,
			FailureRatio: f.BreakerFailureRatio,
		},
	}
}

// AttemptLogFlags configure the attempt-log writer and endpoint health.
type AttemptLogFlags struct {
	DisableAfter time.Duration `name:"disable-after" default:"72h" env:"HOOKD_DISABLE_AFTER" help:"Disable an endpoint after failing continuously this long."`
	WarnAfter    time.Duration `name:"warn-after" env:"HOOKD_WARN_AFTER" help:"Send hookd.endpoint.failing (once per failing episode) after an endpoint failed continuously this long; below --disable-after. Default: 24h, or half of --disable-after when that is shorter than 48h."`
}

// roleSet builds roles for one process, sharing one endpoint index between
// the roles that need it.
type roleSet struct {
	daemon     DaemonFlags
	relay      RelayFlags
	envelope   EnvelopeFlags
	router     RouterFlags
	dispatch   DispatchFlags
	attemptLog AttemptLogFlags

	indexOnce sync.Once
	index     *endpoint.Index
	indexErr  error
}

func (s *roleSet) endpointIndex(env *daemon.Env) (*endpoint.Index, error) {
	s.indexOnce.Do(func() {
		s.index, s.indexErr = endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{
			Source: env.Store, Logger: env.Logger.With("role", "endpoint-index"), Registerer: env.Registry,
		})
	})
	return s.index, s.indexErr
}

// roleFunc adapts a name and a run function to daemon.Role.
type roleFunc struct {
	name string
	run  func(ctx context.Context) error
}

func (r roleFunc) Name() string                  { return r.name }
func (r roleFunc) Run(ctx context.Context) error { return r.run(ctx) }

// indexRole makes sure the shared endpoint index runs once in the process.
func (s *roleSet) indexRole() daemon.RoleFactory {
	return func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		x, err := s.endpointIndex(env)
		if err != nil {
			return nil, err
		}
		return roleFunc{"endpoint-index", x.Run}, nil
	}
}

func (s *roleSet) relayRole() daemon.RoleFactory {
	return func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		r, err := relay.New(relay.Config{
			Slot: s.relay.RelaySlot, Publication: s.relay.RelayPublication, EventsTopic: env.Names.Events,
			DLQTopic: env.Names.DLQ, MaxEnvelopeBytes: s.envelope.MaxEnvelopeBytes, StallTimeout: s.relay.RelayStallTimeout,
		}, relay.Deps{Store: env.Store, KafkaOpts: env.KafkaOptsFor("relay"), Logger: env.Logger.With("role", "relay"), Registerer: env.Registry,
			Tracer: env.Tracer("hookd/relay")})
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		return r, nil // a daemon.Readier: /readyz reports a stalled relay
	}
}

func (s *roleSet) routerRole() daemon.RoleFactory {
	return func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		x, err := s.endpointIndex(env)
		if err != nil {
			return nil, err
		}
		deps := router.Deps{
			Endpoints: x, KafkaOpts: env.KafkaOptsFor("router"), ChangelogKafkaOpts: env.KafkaOpts,
			Logger: env.Logger.With("role", "router"), Registerer: env.Registry, Tracer: env.Tracer("hookd/router"),
		}
		var catalog *eventtype.Catalog
		if s.router.ValidateEventSchemas {
			if catalog, err = eventtype.NewCatalog(eventtype.CatalogConfig{}, env.Store, env.Logger.With("role", "event-type-catalog")); err != nil {
				return nil, err
			}
			deps.Schemas = catalog
		}
		r, err := router.New(router.Config{Topics: env.Names, MaxEnvelopeBytes: s.envelope.MaxEnvelopeBytes,
			DedupeWindow: s.router.DedupeWindow, DedupeMaxKeys: s.router.DedupeMaxKeys, TransactionalID: s.router.TransactionalID,
			TransactionInterval: s.router.transactionInterval()}, deps)
		if err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
		if catalog == nil {
			return roleFunc{"router", r.Run}, nil
		}
		return roleFunc{"router", func(ctx context.Context) error { return runBeside(ctx, catalog.Run, r.Run) }}, nil
	}
}

// runBeside runs helper for as long as main runs, and returns main's error.
func runBeside(ctx context.Context, helper, main func(context.Context) error) error {
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = helper(hctx) }) // returns nil when hctx ends; logs its own failures
	defer wg.Wait()
	defer cancel()
	return main(ctx)
}

// dispatchEndpoints adapts the endpoint index to what the dispatcher reads.
type dispatchEndpoints struct{ x *endpoint.Index }

var _ dispatcher.Endpoints = dispatchEndpoints{}

func (a dispatchEndpoints) Endpoint(id string) (dispatcher.Target, bool) {
	ep, ok := a.x.Endpoint(id)
	if !ok {
		return dispatcher.Target{}, false
	}
	return dispatcher.Target{
		ID: ep.ID, Account: ep.Account, URL: ep.URL, Secrets: ep.Secrets, Disabled: !ep.Active(),
		MaxInFlight: ep.MaxInFlight, Timeout: ep.Timeout, RatePerSec: ep.RatePerSec, Headers: ep.Headers,
		ClientCert: ep.ClientCert, ClientKey: ep.ClientKey,
		SendTraceparent: ep.SendTraceparent,
		FIFO:            ep.FIFO(),
	}, true
}

func (s *roleSet) dispatchRole() daemon.RoleFactory {
	return func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		x, err := s.endpointIndex(env)
		if err != nil {
			return nil, err
		}
		d, err := dispatcher.New(s.dispatch.dispatcherConfig(env.Topics), dispatcher.Deps{
			Endpoints: dispatchEndpoints{x}, Logger: env.Logger.With("role", "dispatch"), Registerer: env.Registry, KafkaOpts: env.KafkaOptsFor("dispatch"),
			PlainKafkaOpts: env.KafkaOpts,
			Tracer:         env.Tracer("hookd/dispatch"),
		})
		if err != nil {
			return nil, fmt.Errorf("dispatcher: %w", err)
		}
		if s.dispatch.AllowPrivateNetworks {
			env.Logger.Warn("SSRF guard off: webhooks may reach loopback, private and metadata addresses (--allow-private-networks)")
		}
		return roleFunc{"dispatch", func(ctx context.Context) error {
			// Before the first load every endpoint would look deleted and
			// its deliveries would be dead-lettered.
			if err := x.WaitReady(ctx); err != nil {
				return err
			}
			return d.Run(ctx)
		}}, nil
	}
}

func (s *roleSet) attemptLogRoles() []daemon.RoleFactory {
	return []daemon.RoleFactory{
		func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
			w, err := attemptlog.New(attemptlog.Config{
				Topic: env.Names.Attempts, DeliveriesTopic: env.Names.Deliveries, OpsTopic: env.Names.Ops, DisableAfter: s.attemptLog.DisableAfter,
				EventsTopic: env.Names.Events, PortalBaseURL: s.daemon.PortalBaseURL,
			}, attemptlog.Deps{Store: env.Store, Logger: env.Logger.With("role", "attempt-log"), Registerer: env.Registry, KafkaOpts: env.KafkaOptsFor("attempt-log"),
				Tracer: env.Tracer("hookd/attempt-log")})
			if err != nil {
				return nil, fmt.Errorf("attempt log: %w", err)
			}
			return roleFunc{"attempt-log", w.Run}, nil
		},
		func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
			m, err := maintenance.NewMonitor(maintenance.MonitorConfig{OpsTopic: env.Names.Ops, DisableAfter: s.attemptLog.DisableAfter,
				EventsTopic: env.Names.Events, WarnAfter: s.attemptLog.WarnAfter, PortalBaseURL: s.daemon.PortalBaseURL},
				maintenance.MonitorDeps{Store: env.Store, Logger: env.Logger.With("role", "health"), Registerer: env.Registry, KafkaOpts: env.KafkaOptsFor("endpoint-health")})
			if err != nil {
				return nil, fmt.Errorf("endpoint health: %w", err)
			}
			return roleFunc{"endpoint-health", m.Run}, nil
		},
		func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
			m, err := maintenance.NewMaintainer(maintenance.MaintainerConfig{Retention: s.daemon.AttemptRetention},
				maintenance.MaintainerDeps{Store: env.Store, Logger: env.Logger.With("role", "partitions"), Registerer: env.Registry})
			if err != nil {
				return nil, fmt.Errorf("attempt partitions: %w", err)
			}
			return roleFunc{"attempt-partitions", m.Run}, nil
		},
		func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
			r, err := maintenance.NewReconciler(maintenance.ReconcilerConfig{Schedule: env.Topics.Schedule},
				maintenance.ReconcilerDeps{Store: env.Store, Logger: env.Logger.With("role", "reconcile"), Registerer: env.Registry})
			if err != nil {
				return nil, fmt.Errorf("reconcile: %w", err)
			}
			return roleFunc{"reconcile", r.Run}, nil
		},
	}
}

// RelayCmd runs the outbox CDC relay alone.
type RelayCmd struct {
	DaemonFlags
	RelayFlags
	EnvelopeFlags
}

// Run implements `hookd relay`.
func (c *RelayCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if err := c.EnvelopeFlags.validate(); err != nil {
		return usage(err)
	}
	s := &roleSet{daemon: c.DaemonFlags, relay: c.RelayFlags, envelope: c.EnvelopeFlags}
	return runRoles(ctx, logger, "relay", c.DaemonFlags, nil, s.relayRole())
}

// RouterCmd runs the fan-out router alone.
type RouterCmd struct {
	DaemonFlags
	EnvelopeFlags
	RouterFlags
}

// Run implements `hookd router`.
func (c *RouterCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if err := c.EnvelopeFlags.validate(); err != nil {
		return usage(err)
	}
	if err := c.RouterFlags.validate(); err != nil {
		return usage(err)
	}
	s := &roleSet{daemon: c.DaemonFlags, envelope: c.EnvelopeFlags, router: c.RouterFlags}
	return runRoles(ctx, logger, "router", c.DaemonFlags, nil, s.indexRole(), s.routerRole())
}

// DispatchCmd runs a dispatcher alone; start several to scale out.
type DispatchCmd struct {
	DaemonFlags
	DispatchFlags
}

// Run implements `hookd dispatch`.
func (c *DispatchCmd) Run(ctx context.Context, logger *slog.Logger) error {
	if err := c.DispatchFlags.validate(); err != nil {
		return usage(err)
	}
	s := &roleSet{daemon: c.DaemonFlags, dispatch: c.DispatchFlags}
	return runRoles(ctx, logger, "dispatch", c.DaemonFlags, &c.EndpointLimitFlags, s.indexRole(), s.dispatchRole())
}

// AttemptLogCmd runs the attempt-log writer, endpoint health, partition
// maintenance and reconciliation.
type AttemptLogCmd struct {
	DaemonFlags
	AttemptLogFlags
}

// Run implements `hookd attempt-log`.
func (c *AttemptLogCmd) Run(ctx context.Context, logger *slog.Logger) error {
	s := &roleSet{daemon: c.DaemonFlags, attemptLog: c.AttemptLogFlags}
	return runRoles(ctx, logger, "attempt-log", c.DaemonFlags, nil, s.attemptLogRoles()...)
}

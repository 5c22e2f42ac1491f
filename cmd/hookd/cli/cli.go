// Package cli is the command line of the hookd daemon: flags mirrored by
// HOOKD_* environment variables (kong), one command per role plus `run`
// (every role in one process), `migrate`, `broker` and `secrets`. It turns flags into
// component configs and hands them to package daemon; it holds no logic of
// its own.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/api/portal"
	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/cmd/internal/cmdline"
	"github.com/hookd/hookd/internal/embedded"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/version"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// Exit codes (package cmdline's).
const (
	ExitOK      = cmdline.ExitOK
	ExitFailure = cmdline.ExitFailure
	ExitUsage   = cmdline.ExitUsage
)

const description = "hookd delivers webhooks: Postgres outbox and Kafka ingress in, signed HTTP out, with retry tiers and a dead-letter topic."

// CLI is the hookd command line.
type CLI struct {
	LogFormat string `name:"log-format" enum:"text,json" default:"text" env:"HOOKD_LOG_FORMAT" help:"Log format: text or json."`
	LogLevel  string `name:"log-level" enum:"debug,info,warn,error" default:"info" env:"HOOKD_LOG_LEVEL" help:"Log level: debug, info, warn or error."`

	Run         RunCmd         `cmd:"" help:"Run every role in one process; embedded Kafka unless --brokers is set."`
	Relay       RelayCmd       `cmd:"" help:"Run the outbox CDC relay (one streams at a time; others wait as standbys)."`
	Router      RouterCmd      `cmd:"" help:"Run the router: validate events and fan them out to deliveries."`
	Dispatch    DispatchCmd    `cmd:"" help:"Run a dispatcher (a consumer group: start more to scale out)."`
	AttemptLog  AttemptLogCmd  `cmd:"" name:"attempt-log" help:"Run the attempt-log writer, endpoint health, partition maintenance and reconciliation."`
	Migrate     MigrateCmd     `cmd:"" help:"Apply the Postgres schema (idempotent) and exit."`
	Broker      BrokerCmd      `cmd:"" help:"Run only the embedded Kafka broker (for running roles as separate processes on one machine)."`
	API         APICmd         `cmd:"" name:"api" help:"Serve only the HTTP API, health and metrics (no delivery role)."`
	Healthcheck HealthcheckCmd `cmd:"" help:"Probe a running hookd's /readyz (container healthcheck); exit 0 when ready."`
	Secrets     SecretsCmd     `cmd:"" help:"Endpoint signing secrets at rest: status, rotate-key (encrypt every secret with the current key)."`
	Version     VersionCmd     `cmd:"" help:"Print the version and exit."`
}

// PostgresFlags select the database.
type PostgresFlags struct {
	DatabaseURL string `name:"database-url" env:"HOOKD_DATABASE_URL,DATABASE_URL" help:"Postgres URL (postgres://user:pass@host:5432/db). Empty uses the standard PG* variables."`
}

func (f PostgresFlags) storeConfig() store.Config { return store.Config{DatabaseURL: f.DatabaseURL} }

// KafkaFlags select the cluster and the topics.
type KafkaFlags struct {
	Brokers       []string `name:"brokers" env:"HOOKD_BROKERS" sep:"," help:"Kafka seed brokers, comma-separated host:port. Empty with 'hookd run' starts the embedded broker."`
	ClientID      string   `name:"client-id" default:"hookd" env:"HOOKD_CLIENT_ID" help:"Kafka client id."`
	TopicPrefix   string   `name:"topic-prefix" default:"webhooks" env:"HOOKD_TOPIC_PREFIX" help:"Prefix of every topic name."`
	Partitions    int32    `name:"partitions" default:"12" env:"HOOKD_PARTITIONS" help:"Partition count of the hookd topics (deliveries, retry tiers and DLQ share it)."`
	RetrySchedule string   `name:"retry-schedule" default:"${retry_schedule}" env:"HOOKD_RETRY_SCHEDULE" help:"Retry tier delays, comma-separated, increasing; one topic each."`
	cmdline.KafkaSecurityFlags
	ReplicationFlags
}

func (f KafkaFlags) kafkaConfigs() (kafkaconn.Config, topics.Config, error) {
	if f.Partitions < 1 { // 0 would mean "the default" to topics.Config
		return kafkaconn.Config{}, topics.Config{}, fmt.Errorf("partitions: must be between 1 and 10000, got %d", f.Partitions)
	}
	sched, err := retrytiers.ParseSchedule(f.RetrySchedule)
	if err != nil {
		return kafkaconn.Config{}, topics.Config{}, err
	}
	var brokers []string
	for _, b := range f.Brokers {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 && f.KafkaSecurityFlags.Given() {
		return kafkaconn.Config{}, topics.Config{}, errSecurityEmbedded
	}
	kc := kafkaconn.Config{Brokers: brokers, ClientID: f.ClientID}
	f.KafkaSecurityFlags.ApplyTo(&kc)
	tc := topics.Config{Prefix: f.TopicPrefix, Partitions: f.Partitions, Schedule: sched}
	f.ReplicationFlags.apply(&tc, len(brokers) == 0)
	return kc, tc, nil
}

// EmbeddedFlags configure the embedded broker.
type EmbeddedFlags struct {
	DataDir     string `name:"data-dir" default:"./data" env:"HOOKD_DATA_DIR" help:"Where the embedded broker keeps its topics and records."`
	KafkaListen string `name:"kafka-listen" default:"127.0.0.1:9092" env:"HOOKD_KAFKA_LISTEN" help:"Address the embedded broker listens on (kcat -b <this>)."`
}

func (f EmbeddedFlags) embeddedConfig() embedded.Config {
	return embedded.Config{DataDir: f.DataDir, Listen: f.KafkaListen}
}

// DaemonFlags are shared by every long-running command.
type DaemonFlags struct {
	PostgresFlags
	KafkaFlags
	Listen           string        `name:"listen" default:"127.0.0.1:8080" env:"HOOKD_LISTEN" help:"HTTP address for /healthz, /readyz, /metrics and the API."`
	NoMigrate        bool          `name:"no-migrate" env:"HOOKD_NO_MIGRATE" help:"Do not apply the Postgres schema at start-up."`
	AttemptRetention time.Duration `name:"attempt-retention" default:"720h" env:"HOOKD_ATTEMPT_RETENTION" help:"Drop attempt-log partitions older than this."`
	AdminToken       string        `name:"admin-token" env:"HOOKD_ADMIN_TOKEN" help:"Bearer token with access to every account on the /v1 API and support sign-in to the portal (empty: admin access off). Prefer the environment variable."`
	Pprof            bool          `name:"pprof" env:"HOOKD_PPROF" help:"Serve Go's profiler (net/http/pprof) at /debug/pprof/ on --listen; with --admin-token set it requires that token (Authorization: Bearer). Off by default."`
	ListenFlags
	PortalFlags
	cmdline.SecretsKeyFlags
}

// PortalFlags configure the delivery portal served under /portal/ on --listen.
type PortalFlags struct {
	PortalBaseURL        string   `name:"portal-base-url" env:"HOOKD_PORTAL_BASE_URL" help:"Public origin of the portal as browsers reach it (https://hooks.example.com); https makes its cookies Secure and __Host-; links from POST /v1/portal-links start with it. Empty: taken from each request (links only from a request to the listen address itself)."`
	PortalFrameAncestors []string `name:"portal-frame-ancestors" env:"HOOKD_PORTAL_FRAME_ANCESTORS" sep:"," help:"Origins allowed to frame the portal (your app's settings page), comma-separated. Empty: framing denied."`
	PortalName           string   `name:"portal-name" env:"HOOKD_PORTAL_NAME" default:"hookd" help:"Your product's name, shown on every portal page and in its messages instead of hookd."`
	PortalAccentColor    string   `name:"portal-accent-color" env:"HOOKD_PORTAL_ACCENT_COLOR" help:"The portal's accent colour, #rgb or #rrggbb (links, the active tab, buttons). Empty: the portal's own blue."`
	PortalLogoURL        string   `name:"portal-logo-url" env:"HOOKD_PORTAL_LOGO_URL" help:"Logo shown before the portal's name: a path on the portal's own origin (/brand/logo.svg) or a data:image/...;base64 URL."`
}

func (f DaemonFlags) daemonConfig() (daemon.Config, error) {
	kc, tc, err := f.kafkaConfigs()
	if err != nil {
		return daemon.Config{}, usage(err)
	}
	pg := f.storeConfig()
	if pg.Secrets, err = f.Keyring(); err != nil {
		return daemon.Config{}, usage(err)
	}
	// The portal's branding is checked here, so a bad flag is one line and
	// exit 2 before anything starts (portal.New checks it again).
	brand := portal.Config{Name: f.PortalName, AccentColor: f.PortalAccentColor, LogoURL: f.PortalLogoURL}
	brand.SetDefaults()
	if err := brand.Validate(); err != nil {
		return daemon.Config{}, usage(fmt.Errorf("--portal-*: %w", err))
	}
	if err := f.ListenFlags.validate(); err != nil {
		return daemon.Config{}, usage(err)
	}
	return daemon.Config{
		Kafka:            kc,
		Postgres:         pg,
		Topics:           tc,
		HTTP:             f.ListenFlags.apply(api.Config{Listen: f.Listen, Pprof: f.Pprof, AdminToken: f.AdminToken}),
		Migrate:          !f.NoMigrate,
		AttemptRetention: f.AttemptRetention,
		AdminToken:       f.AdminToken,
		Portal: portal.Config{BaseURL: f.PortalBaseURL, FrameAncestors: f.PortalFrameAncestors,
			Name: f.PortalName, AccentColor: f.PortalAccentColor, LogoURL: f.PortalLogoURL,
			Topics: tc, AttemptRetention: f.AttemptRetention},
	}, nil
}

// requireBrokers is for the single-role commands: only `run` and `broker`
// embed Kafka.
func (f DaemonFlags) requireBrokers(cmd string) error {
	if len(f.Brokers) == 0 {
		return fmt.Errorf("hookd %s needs --brokers (or HOOKD_BROKERS); only 'hookd run' starts an embedded broker", cmd)
	}
	return nil
}

// runRoles runs one or more roles (no embedded broker) as their own process.
// limits, when the command has those flags, configure the /v1 API's
// endpoint checks; nil leaves the API's defaults.
func runRoles(ctx context.Context, logger *slog.Logger, cmd string, f DaemonFlags, limits *EndpointLimitFlags, roles ...daemon.RoleFactory) error {
	if err := f.requireBrokers(cmd); err != nil {
		return usage(err)
	}
	cfg, err := f.daemonConfig()
	if err != nil {
		return err
	}
	if limits != nil {
		if cfg.API, err = limits.apiConfig(); err != nil {
			return usage(err)
		}
	}
	return daemon.Run(ctx, cfg, logger, roles)
}

// usageError marks an error in the command line or configuration.
type usageError struct{ error }

func usage(err error) error { return usageError{err} }

// Main runs hookd with args (without the program name) and returns the exit
// code. Signals cancel ctx.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cli CLI
	kctx, code, done := cmdline.Parse(&cli, "hookd", description, args, stdout, stderr)
	if done {
		return code
	}
	logger := newLogger(stderr, cli.LogFormat, cli.LogLevel)
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.BindTo(stdout, (*io.Writer)(nil))
	return exitFor(stderr, kctx.Run(logger))
}

func exitFor(stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, context.Canceled) {
		return ExitOK
	}
	fmt.Fprintf(stderr, "hookd: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	var ue usageError
	var se *daemon.StartupError
	if errors.As(err, &ue) || errors.As(err, &se) {
		return ExitUsage
	}
	return ExitFailure
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// RunCmd runs every role in one process.
type RunCmd struct {
	DaemonFlags
	EmbeddedFlags
	RelayFlags
	EnvelopeFlags
	RouterFlags
	DispatchFlags
	AttemptLogFlags
	NoRelay bool `name:"no-relay" env:"HOOKD_NO_RELAY" help:"Do not run the outbox relay (events come only from the events topic; Postgres then needs no wal_level=logical)."`
}

// Run implements `hookd run`.
func (c *RunCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := c.config()
	if err != nil {
		return usage(err)
	}
	return daemon.Run(ctx, cfg, logger, c.roles())
}

// config is the process config of `hookd run`.
func (c *RunCmd) config() (daemon.Config, error) {
	if err := c.DispatchFlags.validate(); err != nil {
		return daemon.Config{}, err
	}
	if err := c.EnvelopeFlags.validate(); err != nil {
		return daemon.Config{}, err
	}
	if err := c.RouterFlags.validate(); err != nil {
		return daemon.Config{}, err
	}
	cfg, err := c.daemonConfig()
	if err != nil {
		return daemon.Config{}, err
	}
	if cfg.API, err = c.EndpointLimitFlags.apiConfig(); err != nil {
		return daemon.Config{}, err
	}
	// The portal's policy page shows what this process runs.
	cfg.Portal.DisableAfter, cfg.Portal.MaxInFlight = c.DisableAfter, c.MaxInFlight
	if len(cfg.Kafka.Brokers) == 0 {
		e := c.embeddedConfig()
		cfg.Embedded = &e
	}
	return cfg, nil
}

// roles lists what `hookd run` runs: every role, one endpoint index.
func (c *RunCmd) roles() []daemon.RoleFactory {
	s := &roleSet{daemon: c.DaemonFlags, relay: c.RelayFlags, envelope: c.EnvelopeFlags, router: c.RouterFlags, dispatch: c.DispatchFlags, attemptLog: c.AttemptLogFlags}
	roles := []daemon.RoleFactory{s.indexRole(), s.routerRole(), s.dispatchRole()}
	if !c.NoRelay {
		roles = append(roles, s.relayRole())
	}
	return append(roles, s.attemptLogRoles()...)
}

// MigrateCmd applies the schema.
type MigrateCmd struct {
	PostgresFlags
}

// Run implements `hookd migrate`.
func (c *MigrateCmd) Run(ctx context.Context, logger *slog.Logger, stdout io.Writer) error {
	if _, err := store.ParsePoolConfig(c.storeConfig()); err != nil {
		return usage(err)
	}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := store.Open(openCtx, c.storeConfig(), logger)
	cancel()
	if err != nil {
		return usage(err)
	}
	defer st.Close()
	res, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(stdout, "schema up to date at version %d\n", res.Version)
		return nil
	}
	fmt.Fprintf(stdout, "applied %d migration(s); schema now at version %d\n", len(res.Applied), res.Version)
	return nil
}

// BrokerCmd runs only the embedded broker.
type BrokerCmd struct {
	EmbeddedFlags
}

// Run implements `hookd broker`.
func (c *BrokerCmd) Run(ctx context.Context, logger *slog.Logger) error {
	b, err := embedded.Start(ctx, c.embeddedConfig(), logger)
	if err != nil {
		return usage(err)
	}
	<-ctx.Done()
	b.Close()
	logger.Info("embedded kafka stopped")
	return nil
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run implements `hookd version`.
func (VersionCmd) Run(stdout io.Writer) error {
	fmt.Fprintln(stdout, "hookd", version.Version)
	return nil
}

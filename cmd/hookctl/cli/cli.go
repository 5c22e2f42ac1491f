// Package cli is the command line of hookctl, hookd's operator tool:
// endpoints, deliveries, dead letters, replay and topics. Each command group
// lives in its own file and talks to Postgres and Kafka through hookd's
// packages; output is a table by default and JSON with --output json.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/cmd/internal/cmdline"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// Exit codes (package cmdline's).
const (
	ExitOK      = cmdline.ExitOK
	ExitFailure = cmdline.ExitFailure
	ExitUsage   = cmdline.ExitUsage
)

// CLI is the hookctl command line. Command groups register here, one field
// each, and live in their own files.
type CLI struct {
	Globals

	Endpoints  EndpointsCmd  `cmd:"" help:"Manage webhook endpoints: add, list, show, update, disable, enable, rotate-secret, delete."`
	Topics     TopicsCmd     `cmd:"" help:"Inspect hookd's Kafka topics."`
	Deliveries DeliveriesCmd `cmd:"" help:"The delivery log: list an endpoint's deliveries, show a delivery's attempt timeline, resend one."`
	DLQ        DLQCmd        `cmd:"" name:"dlq" help:"Dead letters: list, replay (resumable, audited), replay audit log."`
	Tokens     TokensCmd     `cmd:"" help:"HTTP API tokens, one account each: create (shown once), list, revoke."`
	Portal     PortalCmd     `cmd:"" help:"Delivery portal links: one-time URLs that open /portal/ for an account."`
	EventTypes EventTypesCmd `cmd:"" name:"event-types" help:"The event-type catalogue: list, show, create, update, delete (JSON Schema and example per type)."`
}

// Globals are the connection and output flags every command shares. They
// are grouped: hookctl --help lists them after the commands, and a
// command's --help only names them.
type Globals struct {
	Output        string   `name:"output" short:"o" enum:"table,json" default:"table" env:"HOOKCTL_OUTPUT" group:"output" help:"Output format: table or json."`
	DatabaseURL   string   `name:"database-url" env:"HOOKD_DATABASE_URL,DATABASE_URL" group:"connection" help:"Postgres URL. Empty uses the standard PG* variables."`
	Brokers       []string `name:"brokers" default:"127.0.0.1:9092" env:"HOOKD_BROKERS" sep:"," group:"connection" help:"Kafka seed brokers, comma-separated (the default is hookd run's embedded broker)."`
	TopicPrefix   string   `name:"topic-prefix" default:"webhooks" env:"HOOKD_TOPIC_PREFIX" group:"connection" help:"Prefix of hookd's topic names."`
	RetrySchedule string   `name:"retry-schedule" default:"${retry_schedule}" env:"HOOKD_RETRY_SCHEDULE" group:"connection" help:"Retry schedule hookd was started with (names the tier topics)."`

	cmdline.KafkaSecurityFlags `group:"kafka-security"`
	cmdline.SecretsKeyFlags    `group:"connection"`

	stdout io.Writer
	logger *slog.Logger
}

// Out is where command output goes.
func (g *Globals) Out() io.Writer { return g.stdout }

// JSON reports whether --output json was asked for.
func (g *Globals) JSON() bool { return g.Output == "json" }

// PrintJSON writes v as indented JSON.
func (g *Globals) PrintJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Table returns a tab-aligned writer; Flush it when done.
func (g *Globals) Table() *tabwriter.Writer {
	return tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
}

// TopicsConfig is the topic layout named by the flags.
func (g *Globals) TopicsConfig() (topics.Config, error) {
	sched, err := retrytiers.ParseSchedule(g.RetrySchedule)
	if err != nil {
		return topics.Config{}, Usage(err)
	}
	cfg := topics.Config{Prefix: g.TopicPrefix, Schedule: sched}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return topics.Config{}, Usage(err)
	}
	return cfg, nil
}

// Store opens Postgres; an unreachable database, or one without hookd's
// current schema (it says to run hookd migrate), is a usage error (exit 2).
func (g *Globals) Store(ctx context.Context) (*store.Store, error) {
	cfg := store.Config{DatabaseURL: g.DatabaseURL}
	var err error
	if cfg.Secrets, err = g.Keyring(); err != nil {
		return nil, Usage(err)
	}
	if _, err := store.ParsePoolConfig(cfg); err != nil {
		return nil, Usage(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg, g.logger)
	if err != nil {
		return nil, Usage(err)
	}
	if err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, Usage(err)
	}
	return st, nil
}

// Kafka returns a client on the brokers, checked to answer within 10s.
func (g *Globals) Kafka(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	kc, err := g.KafkaConfig(kafkaconn.Config{Brokers: g.Brokers, ClientID: "hookctl"})
	if err != nil {
		return nil, Usage(err)
	}
	cl, err := kgo.NewClient(append(kafkaconn.Opts(kc, g.logger), opts...)...)
	if err != nil {
		return nil, Usage(fmt.Errorf("kafka client: %w", err))
	}
	if err := kafkaconn.Check(ctx, cl, kc.Brokers, 10*time.Second); err != nil {
		cl.Close()
		return nil, Usage(err)
	}
	return cl, nil
}

// UsageError marks a bad flag, bad input or unreachable dependency: exit 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage wraps err as a UsageError.
func Usage(err error) error { return UsageError{err} }

// helpGroups title the shared flags: listed after the commands in hookctl
// --help, named in one line in a command's (cmdline.SharedFlagsOnce).
var helpGroups = []kong.Group{
	{Key: "output", Title: "Output:"},
	{Key: "connection", Title: "Connection (every command; also from the environment):"},
	{Key: "kafka-security", Title: "Kafka TLS and SASL (every command):"},
}

// Main runs hookctl with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cli CLI
	kctx, code, done := cmdline.Parse(&cli, "hookctl", "hookctl operates hookd: endpoints, deliveries, dead letters, replay and topics.",
		args, stdout, stderr, kong.ExplicitGroups(helpGroups), cmdline.SharedFlagsOnce("connection", "kafka-security"))
	if done {
		return code
	}
	cli.stdout = stdout
	// Client libraries log only errors (a failure is reported once, as the
	// exit line); results go to stdout.
	cli.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	kctx.BindTo(ctx, (*context.Context)(nil))
	err := kctx.Run(&cli.Globals)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "hookctl: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
	var ue UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailure
}

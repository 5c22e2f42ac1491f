// Package kafkaconn owns how hookd connects to Kafka: the seed brokers, the
// client id, TLS and SASL (PLAIN, SCRAM-SHA-256/512), the producer settings
// that cannot lose an acknowledged record, logging through slog (kslog) and
// client metrics (kprom). Roles build their own clients from Opts plus their
// role-specific options. It never produces or consumes records itself, and
// never logs or returns a SASL password.
//
// Internal: only hookd's own packages can import it.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"
)

// Config configures the connection to Kafka.
type Config struct {
	// Brokers are the seed brokers, host:port. Required here; the daemon
	// fills it with the embedded broker's address when none is given.
	Brokers []string
	// ClientID names hookd's clients in broker logs and quotas.
	// Defaults to "hookd".
	ClientID string
	// DialTimeout bounds one connection attempt. Defaults to 5s.
	DialTimeout time.Duration
	// SessionTimeout is the consumer-group session timeout of every group
	// hookd joins (router, dispatchers, attempt-log writers): how long a
	// killed or frozen member keeps its partitions before the group hands
	// them on. Kafka's client default of 45s would leave those partitions
	// unconsumed that long; heartbeats go every 3s. The broker must allow
	// it (group.min.session.timeout.ms, 6s by default). Defaults to 10s.
	SessionTimeout time.Duration
	// TLS encrypts and authenticates the connections. Defaults to off
	// (plaintext).
	TLS TLS
	// SASL authenticates hookd to the brokers. Defaults to none.
	SASL SASL

	// tlsConfig is TLS loaded from its files by Validate.
	tlsConfig *tls.Config
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.ClientID == "" {
		c.ClientID = "hookd"
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
}

// Validate reports the first bad field, and loads the TLS certificates so
// that a missing or malformed file is reported here, once, at start-up.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("brokers: none given")
	}
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("brokers: %q is not host:port", b)
		}
	}
	if c.SessionTimeout != 0 && c.SessionTimeout < 6*time.Second {
		return fmt.Errorf("kafka session timeout: must be at least 6s (the broker's minimum), got %s", c.SessionTimeout)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("kafka dial timeout: must not be negative, got %s", c.DialTimeout)
	}
	if err := c.SASL.validate(); err != nil {
		return err
	}
	tc, err := c.TLS.load()
	if err != nil {
		return err
	}
	c.tlsConfig = tc
	return nil
}

// MetricsHook returns a kgo hook exporting one client's metrics (kprom) on
// reg under the "hookd_kafka" namespace, labelled client=<name>. A kprom
// hook serves exactly one client, so every client gets its own, with its
// own name; a name used twice keeps the first client's series.
func MetricsHook(reg prometheus.Registerer, name string) kgo.Hook {
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"client": name}, reg)
	return kprom.NewMetrics("hookd_kafka", kprom.Registerer(tolerantRegisterer{wrapped}))
}

// tolerantRegisterer ignores a collector registered twice instead of
// panicking (kprom registers with MustRegister).
type tolerantRegisterer struct{ prometheus.Registerer }

func (r tolerantRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r tolerantRegisterer) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}

// Opts returns the client options every hookd client shares: seeds, client
// id, TLS, SASL, logging, and a producer that cannot lose an acknowledged
// record: acks=all (every in-sync replica, at least min.insync.replicas of
// them, has the record before the produce succeeds) and idempotence (a
// retried produce never writes a duplicate or reorders a partition). Both
// are kgo's defaults, set explicitly and kept on purpose; never add
// kgo.DisableIdempotentWrite or weaker acks. Add MetricsHook per client.
//
// cfg should have passed Validate, which loads the TLS files. If it has not
// and a file cannot be loaded, every dial fails with the load error, so the
// start-up check reports it instead of a vague timeout.
func Opts(cfg Config, logger *slog.Logger, hooks ...kgo.Hook) []kgo.Opt {
	cfg.SetDefaults()
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DialTimeout(cfg.DialTimeout),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(kslog.New(slog.New(newQuietInfo(logger.Handler())).With("component", "kafka"))),
		kgo.RetryBackoffFn(retryBackoff),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	if cfg.TLS.enabled() {
		tc := cfg.tlsConfig
		if tc == nil {
			var err error
			if tc, err = cfg.TLS.load(); err != nil {
				opts = append(opts, kgo.Dialer(func(context.Context, string, string) (net.Conn, error) { return nil, err }))
			}
		}
		if tc != nil {
			opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
		}
	}
	if m := cfg.SASL.mechanism(); m != nil {
		if !cfg.TLS.enabled() && strings.EqualFold(cfg.SASL.Mechanism, MechanismPlain) {
			logger.Warn("SASL PLAIN without TLS sends the Kafka password in clear text; set TLS")
		}
		opts = append(opts, kgo.SASL(m))
	}
	if len(hooks) > 0 {
		opts = append(opts, kgo.WithHooks(hooks...))
	}
	return opts
}

// Check asks the cluster for its brokers within timeout, so an unreachable
// cluster is one clear error at start-up instead of endless retries.
func Check(ctx context.Context, cl *kgo.Client, brokers []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		if mech, refused := refusedCredentials(cl, err); refused {
			return fmt.Errorf("kafka brokers %s refused hookd's %s credentials (%v): check the SASL mechanism, username and password",
				strings.Join(brokers, ","), mech, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("kafka brokers %s unreachable: no answer within %s", strings.Join(brokers, ","), timeout)
		}
		return fmt.Errorf("kafka brokers %s unreachable: %w", strings.Join(brokers, ","), err)
	}
	return nil
}

// refusedCredentials tells an authentication failure from other errors.
// Apache Kafka answers a bad login with SASL_AUTHENTICATION_FAILED; some
// brokers (kfake among them) close the connection instead, which kgo reports
// as a bare EOF after the connection was established (an EOF on the first
// read is kgo's ErrFirstReadEOF: TLS or SASL missing, not bad credentials).
func refusedCredentials(cl *kgo.Client, err error) (mechanism string, refused bool) {
	for _, v := range cl.OptValues(kgo.SASL) {
		if ms, ok := v.([]sasl.Mechanism); ok && len(ms) > 0 {
			mechanism = ms[0].Name()
		}
	}
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.IllegalSaslState) || errors.Is(err, kerr.UnsupportedSaslMechanism) {
		return mechanism, true
	}
	var first *kgo.ErrFirstReadEOF
	if errors.As(err, &first) || mechanism == "" {
		return "", false
	}
	return mechanism, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// quietInfo logs the Kafka client's info lines (metadata refreshes,
// assignments, connection churn: most of a process's output otherwise) at
// debug. Its warnings and errors keep their level the first time, but a
// line repeating one seen within repeatQuiet is logged at debug: during an
// outage the client retries every second and would otherwise log each retry
// ("unable to open connection to broker", "group manage loop errored").
// hookd logs the lifecycle events that matter to an operator itself, once
// each (the outage monitor: one WARN per outage).
type quietInfo struct {
	slog.Handler
	seen *repeats
}

// repeatQuiet is how long a client warning must not repeat before it is
// logged at its own level again: one line per message and outage.
const repeatQuiet = time.Minute

// repeats remembers when each client message was last seen. kgo's messages
// are constant strings, so the map stays small.
type repeats struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// clientLogs is shared by every client of the process, so an outage is
// logged once per message, not once per client.
var clientLogs = &repeats{last: map[string]time.Time{}}

// repeated records msg at now and reports whether it was seen within
// repeatQuiet before.
func (r *repeats) repeated(msg string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.last[msg]
	r.last[msg] = now
	return ok && now.Sub(prev) < repeatQuiet
}

func newQuietInfo(h slog.Handler) quietInfo { return quietInfo{Handler: h, seen: clientLogs} }

func (q quietInfo) Enabled(ctx context.Context, l slog.Level) bool {
	// A repeated warning is logged at debug: ask for the lowest level it
	// may end at, and decide in Handle.
	return q.Handler.Enabled(ctx, demote(l)) || (l >= slog.LevelWarn && q.Handler.Enabled(ctx, slog.LevelDebug))
}

func (q quietInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	if r.Level >= slog.LevelWarn && q.seen != nil && q.seen.repeated(r.Message, r.Time) {
		r.Level = slog.LevelDebug
	}
	if !q.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return q.Handler.Handle(ctx, r)
}

func (q quietInfo) WithAttrs(as []slog.Attr) slog.Handler {
	return quietInfo{Handler: q.Handler.WithAttrs(as), seen: q.seen}
}
func (q quietInfo) WithGroup(name string) slog.Handler {
	return quietInfo{Handler: q.Handler.WithGroup(name), seen: q.seen}
}

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

// retryBackoff is kgo's backoff between retries (requests, connections,
// rejoining the group): 250ms doubling to at most 1s, with ±20% jitter.
// kgo's default goes to 5s, so after an outage the consumers of a group came
// back up to 5s apart: the first to rejoin took every partition, and the
// rebalance when the others joined re-delivered what it had finished past
// its commit watermark.
func retryBackoff(fails int) time.Duration {
	const lo, hi = 250 * time.Millisecond, time.Second
	d := hi
	if fails <= 1 {
		d = lo
	} else if fails < 4 {
		d = lo << (fails - 1)
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Package kafkaconn owns how hookd connects to Kafka: the seed brokers, the
// client id, the producer settings that cannot lose an acknowledged record,
// logging through slog (kslog) and client metrics (kprom). Roles build their
// own clients from Opts plus their role-specific options. It never produces
// or consumes records itself.
package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.ClientID == "" {
		c.ClientID = "hookd"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
}

// Validate reports the first bad field.
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
	if c.DialTimeout < 0 {
		return fmt.Errorf("kafka dial timeout: must not be negative, got %s", c.DialTimeout)
	}
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
// id, logging, and a producer that cannot lose an acknowledged record
// (acks=all and idempotence are kgo's defaults, kept on purpose). Add
// MetricsHook per client.
func Opts(cfg Config, logger *slog.Logger, hooks ...kgo.Hook) []kgo.Opt {
	cfg.SetDefaults()
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DialTimeout(cfg.DialTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(kslog.New(logger.With("component", "kafka"))),
		kgo.ProducerLinger(5 * time.Millisecond),
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
		if ctx.Err() != nil {
			return fmt.Errorf("kafka brokers %s unreachable: no answer within %s", strings.Join(brokers, ","), timeout)
		}
		return fmt.Errorf("kafka brokers %s unreachable: %w", strings.Join(brokers, ","), err)
	}
	return nil
}

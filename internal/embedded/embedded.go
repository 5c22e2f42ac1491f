// Package embedded runs hookd's in-process Kafka-protocol broker (franz-go's
// kfake) when no --brokers are given: one broker, persisted under a data
// directory, listening on a loopback address that standard tools (kcat) can
// reach. It owns the broker's lifecycle and its data-directory lock, and
// after a crash repairs what kfake leaves undone (recover.go: the abort
// markers of transactions open at the kill) before admitting clients;
// production deployments point --brokers at real Kafka instead.
//
// Internal: only hookd's own packages can import it.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the embedded broker.
type Config struct {
	// DataDir holds the broker's topics, records and group offsets; they
	// survive restarts. Defaults to "./data".
	DataDir string
	// Listen is the host:port the broker listens on and advertises.
	// Defaults to "127.0.0.1:9092".
	Listen string
	// SyncWrites fsyncs every produced batch before acknowledging it, so an
	// acknowledged record survives a machine crash, not only a process
	// crash. Defaults to false (the OS page cache, like Kafka's default).
	SyncWrites bool
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:9092"
	}
}

func (c *Config) validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("kafka listen: %q is not host:port", c.Listen)
	}
	if host == "" {
		return fmt.Errorf("kafka listen: %q needs a host (e.g. 127.0.0.1:9092)", c.Listen)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("kafka listen: %q has a bad port", c.Listen)
	}
	return nil
}

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	lock    *os.File
	addr    string
	acc     *acceptor
	dataDir string
	logger  *slog.Logger
}

// ErrDataDirInUse is returned when another process holds the data directory.
var ErrDataDirInUse = errors.New("data directory in use by another hookd")

// Start opens (or creates) the data directory, takes its lock and starts the
// broker. Topics and records found in the directory are served again.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (*Broker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.DataDir, "hookd.lock"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %s", ErrDataDirInUse, cfg.DataDir)
	}
	crash, err := crashed(cfg.DataDir)
	if err != nil {
		releaseLock(lock)
		return nil, err
	}
	// Bind first so that a busy port is a clear error, then hand the
	// listener to kfake.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		releaseLock(lock)
		return nil, fmt.Errorf("kafka listen %s: %w", cfg.Listen, listenCause(err))
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	acc := newAcceptor(ln, logger)
	private := ""
	if crash {
		if private, err = acc.hold(); err != nil {
			acc.Close()
			releaseLock(lock)
			return nil, fmt.Errorf("starting embedded kafka: %w", err)
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(p),
		kfake.ListenFn(func(string, string) (net.Listener, error) { return acc, nil }),
		kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")),
		kfake.WithLogger(kfakeLogger{logger}),
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		acc.Close()
		releaseLock(lock)
		return nil, fmt.Errorf("starting embedded kafka: %w", err)
	}
	b := &Broker{cluster: c, lock: lock, addr: ln.Addr().String(), acc: acc, dataDir: cfg.DataDir, logger: logger}
	if crash {
		err := closeCrashedTransactions(ctx, b.addr, private, logger)
		acc.release()
		if err != nil {
			c.Close()
			releaseLock(lock)
			return nil, fmt.Errorf("embedded kafka after a crash: %w", err)
		}
	}
	logger.InfoContext(ctx, "embedded kafka started", "listen", b.addr, "data_dir", cfg.DataDir)
	return b, nil
}

// Addrs are the addresses clients dial.
func (b *Broker) Addrs() []string { return []string{b.addr} }

// Err says why the broker is not accepting new connections (its listener
// is retrying after an accept error such as "too many open files"), or nil.
// Connections already open keep working meanwhile, so a client that has
// one sees nothing wrong: readiness must ask here.
func (b *Broker) Err() error { return b.acc.Err() }

// Close stops the broker, flushing its data to disk, and releases the lock.
func (b *Broker) Close() {
	b.cluster.Close()
	if err := markCleanStop(b.dataDir); err != nil {
		// The next start repairs transactions it need not: harmless.
		b.logger.Warn("embedded kafka: recording the clean stop", "error", err)
	}
	releaseLock(b.lock)
}

func releaseLock(f *os.File) {
	unlockFile(f)
	_ = f.Close()
}

// kfakeLogger routes kfake's warnings and errors to slog; its info level
// logs every request and stays off.
type kfakeLogger struct{ l *slog.Logger }

func (k kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		k.l.Error("embedded kafka: " + fmt.Sprintf(msg, args...))
	case kfake.LogLevelWarn:
		k.l.Debug("embedded kafka: " + fmt.Sprintf(msg, args...))
	}
}

// listenCause drops net's "listen tcp <addr>:" prefix, which repeats the
// address the caller names already.
func listenCause(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

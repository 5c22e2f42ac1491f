// Package store owns hookd's Postgres schema "webhooks": its migrations, the
// connection pool and every query hookd runs. It translates pgx errors for
// the rest of hookd: callers branch on the sentinel errors defined here
// (ErrNotFound, ...), never on pgx's. The one exception is producer/relay,
// which speaks the replication protocol on a pgconn connection of its own
// and reads that connection's errors (a busy slot, a receive timeout)
// itself. Endpoint signing secrets are encrypted at rest here, and only
// here (Config.Secrets, package secretbox): callers read and write plain
// secrets. It never talks to Kafka or to endpoints.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/secretbox"
)

// ErrNotFound is returned when a row asked for by id does not exist.
var ErrNotFound = errors.New("not found")

// Config configures the Postgres connection.
type Config struct {
	// DatabaseURL is a libpq connection string or URL. Empty means the
	// standard PG* environment variables (PGHOST, PGPORT, PGUSER, ...).
	// Defaults to "".
	DatabaseURL string
	// MaxConns caps the pool. Defaults to 10.
	MaxConns int32
	// ConnectTimeout bounds establishing a connection. Defaults to 5s.
	ConnectTimeout time.Duration
	// Secrets encrypts endpoint signing secrets at rest: writes seal them
	// under its current key, reads open them under any of its keys, and
	// plain-text secrets (written before a key was given) still read. Nil
	// writes plain text and fails to read a sealed secret. Defaults to nil.
	Secrets *secretbox.Keyring
}

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = 10
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
}

func (c *Config) validate() error {
	if c.MaxConns < 1 {
		return fmt.Errorf("database max conns: must be at least 1, got %d", c.MaxConns)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("database connect timeout: must not be negative, got %s", c.ConnectTimeout)
	}
	return nil
}

// Store is the handle on hookd's Postgres schema.
type Store struct {
	pool    *pgxpool.Pool
	logger  *slog.Logger
	secrets *secretbox.Keyring
	// windowsAlways makes WriteAttempts render every batch as one with
	// several attempts of a delivery (tests compare both renderings).
	windowsAlways bool
}

// ParsePoolConfig validates cfg and turns it into a pgxpool config, so that a
// malformed URL is reported before anything connects.
func ParsePoolConfig(cfg Config) (*pgxpool.Config, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %s", describeParseError(err))
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	return pc, nil
}

// Open connects to Postgres and checks that it answers within the connect
// timeout.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Store, error) {
	pc, err := ParsePoolConfig(cfg)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	s := &Store{pool: pool, logger: logger, secrets: cfg.Secrets}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s:%d unreachable: %s%s", pc.ConnConfig.Host, pc.ConnConfig.Port, oneLine(err), defaultsHint(cfg, pc))
	}
	return s, nil
}

// defaultsHint explains a failed connection that nothing configured: no
// URL and none of PGHOST, PGUSER, PGDATABASE, so libpq's defaults (the OS
// user on the local socket) were tried, which is rarely hookd's database.
func defaultsHint(cfg Config, pc *pgxpool.Config) string {
	if cfg.DatabaseURL != "" {
		return ""
	}
	for _, v := range []string{"PGHOST", "PGUSER", "PGDATABASE"} {
		if os.Getenv(v) != "" {
			return ""
		}
	}
	return fmt.Sprintf("; no DATABASE_URL set: tried the PG* defaults (user %s on %s); set DATABASE_URL (or --database-url), e.g. the URL `make run` prints",
		pc.ConnConfig.User, pc.ConnConfig.Host)
}

// Pool exposes the pool to packages that run their own SQL in a caller's
// transaction (producer's outbox helper) or need a dedicated connection
// (LISTEN, replication).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close releases every connection.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that Postgres answers a query.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return translate(err)
	}
	return nil
}

// translate maps pgx errors onto this package's sentinels.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// oneLine shortens pgx connection errors, which nest every address tried,
// to their last and most telling cause.
func oneLine(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		if u := errors.Unwrap(connErr); u != nil {
			return lastCause(u).Error()
		}
	}
	return lastCause(err).Error()
}

func lastCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func describeParseError(err error) string {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return pe.Error()
	}
	return err.Error()
}

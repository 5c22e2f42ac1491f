package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// SchemaVersion is the newest migration embedded in this binary, read from
// the migration file names ("00001_schema.sql" is version 1).
func SchemaVersion() (int64, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return 0, err
	}
	var newest int64
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: bad version prefix", e.Name())
		}
		newest = max(newest, v)
	}
	return newest, nil
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	// Applied lists the versions applied by this call, oldest first; empty
	// when the schema was already current.
	Applied []int64
	// Version is the schema version after the call.
	Version int64
}

// Migrate brings the webhooks schema to the newest embedded version. It is
// idempotent and safe to run from several processes at once: goose holds a
// Postgres advisory lock while it works.
func (s *Store) Migrate(ctx context.Context) (MigrateResult, error) {
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS webhooks"); err != nil {
		// Two processes racing on IF NOT EXISTS: one loses with a unique
		// violation, and the schema is there all the same.
		var exists bool
		if qerr := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'webhooks')").Scan(&exists); qerr != nil || !exists {
			return MigrateResult{}, fmt.Errorf("creating schema webhooks: %s", oneLine(err))
		}
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return MigrateResult{}, fmt.Errorf("migration lock: %w", err)
	}
	p, err := newProvider(db, s.logger, goose.WithSessionLocker(locker))
	if err != nil {
		return MigrateResult{}, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("migrating: %w", err)
	}
	var res MigrateResult
	for _, r := range results {
		res.Applied = append(res.Applied, r.Source.Version)
	}
	if res.Version, err = p.GetDBVersion(ctx); err != nil {
		return res, fmt.Errorf("reading schema version: %w", err)
	}
	return res, nil
}

func newProvider(db *sql.DB, logger *slog.Logger, opts ...goose.ProviderOption) (*goose.Provider, error) {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	opts = append(opts, goose.WithTableName("webhooks.goose_db_version"), goose.WithDisableGlobalRegistry(true))
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	return goose.NewProvider(goose.DialectPostgres, db, sub, opts...)
}

// ErrSchemaBehind is returned by CheckSchema when the database's webhooks
// schema is missing or older than this binary's migrations.
var ErrSchemaBehind = errors.New("run `hookd migrate` against this database first")

// CheckSchema reports, as ErrSchemaBehind naming both versions, a database
// whose schema this binary cannot use: none at all, or one older than its
// newest migration. Tools that only read and write rows (hookctl) call it
// so that a fresh database gets advice instead of a raw SQL error.
func (s *Store) CheckSchema(ctx context.Context) error {
	want, err := SchemaVersion()
	if err != nil {
		return err
	}
	// Two queries: Postgres resolves a table name while it plans, so one
	// query cannot ask whether the table exists and then read it.
	var have *int64
	var exists bool
	err = s.pool.QueryRow(ctx, `SELECT to_regclass('webhooks.goose_db_version') IS NOT NULL`).Scan(&exists)
	if err == nil && exists {
		err = s.pool.QueryRow(ctx, `SELECT max(version_id) FROM webhooks.goose_db_version WHERE is_applied`).Scan(&have)
	}
	if err != nil {
		return fmt.Errorf("reading the schema version: %s", oneLine(err))
	}
	switch {
	case have == nil || *have == 0:
		return fmt.Errorf("the database has no hookd schema: %w", ErrSchemaBehind)
	case *have < want:
		return fmt.Errorf("the database's hookd schema is at version %d, this binary needs %d: %w", *have, want, ErrSchemaBehind)
	}
	return nil
}

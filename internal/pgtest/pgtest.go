// Package pgtest gives tests a fresh, migrated Postgres database of their own
// on the server named by TEST_DATABASE_URL, DATABASE_URL or the PG*
// variables (what `make test` sets up with pg_virtualenv). It is for tests
// only and never creates anything outside the databases it names.
//
// Internal: only hookd's own packages can import it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/store"
)

// BaseURL is the connection string of the server the tests use.
func BaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return os.Getenv("DATABASE_URL")
}

// DB is one test's database.
type DB struct {
	// URL connects to the test's database.
	URL string
	// Name is the database name.
	Name string
	// Store is open on it, already migrated.
	Store *store.Store
}

// New creates a database for t, migrates it, and drops it when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	db := NewUnmigrated(t)
	if _, err := db.Store.Migrate(context.Background()); err != nil {
		t.Fatalf("pgtest: migrating %s: %v", db.Name, err)
	}
	return db
}

// NewUnmigrated creates an empty database for t and drops it when t ends.
func NewUnmigrated(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := BaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: no Postgres for the tests (run them with `make test`, or set TEST_DATABASE_URL/DATABASE_URL/PG*): %v", err)
	}
	defer admin.Close(context.Background())

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "hookd_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u := url.URL{Scheme: "postgres", Path: "/" + name, User: url.User(cfg.User)}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", fmt.Sprint(cfg.Port))
	} else {
		u.Host = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	dbURL := u.String()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dbURL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("pgtest: opening %s: %v", name, err)
	}
	t.Cleanup(func() {
		st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("pgtest: dropping %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// Replication slots pin a database; drop any the test left behind.
		_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", name)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: dropping %s: %v", name, err)
		}
	})
	return &DB{URL: dbURL, Name: name, Store: st}
}

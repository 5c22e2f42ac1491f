package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// freePort is a loopback port nothing listens on a moment later.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// Issue 13 item 10: with nothing configured, the PG* defaults are tried
// (the OS user on the local socket) and the error says so, in one line;
// with a URL or PGHOST/PGUSER/PGDATABASE set, no hint. Not parallel: it
// sets the PG* variables.
func TestOpenHintsAtDatabaseURLWhenNothingIsSet(t *testing.T) {
	port := fmt.Sprint(freePort(t)) // no server there, on TCP or on a socket
	for _, v := range []string{"PGHOST", "PGHOSTADDR", "PGUSER", "PGDATABASE", "PGSERVICE", "PGPASSWORD"} {
		t.Setenv(v, "")
	}
	t.Setenv("PGPORT", port)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	cfg := store.Config{ConnectTimeout: 2 * time.Second}

	_, err := store.Open(ctx, cfg, logger)
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), "no DATABASE_URL set: tried the PG* defaults (user ")
	require.Contains(t, err.Error(), "set DATABASE_URL (or --database-url), e.g. the URL `make run` prints")
	require.NotContains(t, err.Error(), "\n")

	t.Setenv("PGHOST", "127.0.0.1")
	_, err = store.Open(ctx, cfg, logger)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "DATABASE_URL", "PGHOST names a server: the defaults were not what was tried")

	t.Setenv("PGHOST", "")
	cfg.DatabaseURL = "postgres://hookd@127.0.0.1:" + port + "/hookd"
	_, err = store.Open(ctx, cfg, logger)
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "no DATABASE_URL"), err.Error())
}

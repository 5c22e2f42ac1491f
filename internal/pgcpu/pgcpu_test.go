package pgcpu

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/pgtest"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/wait"
)

func TestServerCPUCountsBackends(t *testing.T) {
	base := pgtest.BaseURL()
	if base == "" && os.Getenv("PGHOST") == "" {
		t.Skip("no Postgres: run through scripts/test.sh")
	}
	ctx := context.Background()
	pm, err := PostmasterPID(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	m := Meter{Postmaster: pm}
	before := m.Read()
	if !before.OK {
		t.Fatal("no reading")
	}
	// A backend that burns CPU and exits: its time must count (through
	// the postmaster's cutime once it is reaped, or as a live child).
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 20000000)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	// An exiting backend shows no time until the postmaster reaps it.
	wait.For(t, 10*time.Second, "the server's CPU to count the closed backend's seconds", func() bool {
		return m.Read().Total-before.Total >= 200*time.Millisecond
	})
}

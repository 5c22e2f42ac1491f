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

// localServer returns the test server's URL and a Meter of its CPU, or
// skips t without one.
func localServer(t *testing.T) (string, Meter) {
	t.Helper()
	base := pgtest.BaseURL()
	if base == "" && os.Getenv("PGHOST") == "" {
		t.Skip("no Postgres: run through scripts/test.sh")
	}
	pm, err := PostmasterPID(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	return base, Meter{Postmaster: pm}
}

func TestServerCPUCountsBackends(t *testing.T) {
	ctx := context.Background()
	base, m := localServer(t)
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

// The server's CPU never goes down between readings, even while many
// backends exit at once (a client closing its pool): a backend reaped
// between the read of the postmaster and of its live children must not
// drop out of the total. Fails when a reading misses the exiting backends'
// seconds (the first reading after the close came out lower: 0.61s, then
// 0.25s, in one run).
func TestReadingsDoNotMissExitingBackends(t *testing.T) {
	ctx := context.Background()
	base, m := localServer(t)
	for round := range 2 {
		conns := make([]*pgx.Conn, 20)
		for i := range conns {
			c, err := pgx.Connect(ctx, base)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, "SELECT count(*) FROM generate_series(1, 300000)"); err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		prev := m.Read()
		if !prev.OK {
			t.Fatal("no reading")
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			for _, c := range conns {
				go c.Close(ctx)
			}
		}()
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			r := m.Read()
			if !r.OK {
				t.Fatalf("round %d: no reading", round)
			}
			if r.Total < prev.Total {
				t.Fatalf("round %d: the server's CPU went down from %s to %s while backends exited", round, prev.Total, r.Total)
			}
			prev = r
		}
		<-closed
	}
}

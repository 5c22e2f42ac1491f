// Command walsendlag measures how late Postgres's WAL sender sends small
// committed transactions to a logical replication client (what hookd's
// relay is) while another session writes batches of rows, and how that
// lateness grows with the WAL records the batches make (one per heap row
// and one per index entry), in the same database or in another one.
//
// It answers a question hookbench cannot isolate: the relay's tail at half
// load (stage relay_receive) is the WAL sender reaching the outbox's commit
// late, because it reads every WAL record of the server in order, one per
// loop with a recv() for client replies each (see docs/benchmarks.md,
// nineteenth session). Run it inside `pg_virtualenv -o wal_level=logical`:
//
//	pg_virtualenv -o wal_level=logical go run ./bench/walsendlag --indexes 2 --rows 7200
//
// It creates (and drops at the end) the tables walsendlag_small and
// walsendlag_batch, a publication and a temporary slot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

type config struct {
	url, batchURL string
	rows, indexes int
	every, small  time.Duration
	duration      time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.url, "database-url", os.Getenv("DATABASE_URL"), "database of the small commits and the slot (wal_level=logical; DATABASE_URL; empty: libpq's PG* variables, as pg_virtualenv sets them)")
	flag.StringVar(&c.batchURL, "batch-database-url", "", "database of the batches (default: --database-url); another database of the same server is read by the same WAL sender")
	flag.IntVar(&c.rows, "rows", 7200, "rows per batch (0: no batches)")
	flag.IntVar(&c.indexes, "indexes", 2, "secondary indexes on the batch table besides its primary key (-1: no primary key either)")
	flag.DurationVar(&c.every, "every", 600*time.Millisecond, "time between batches")
	flag.DurationVar(&c.small, "small-every", 2*time.Millisecond, "time between small one-row commits")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long to run")
	flag.Parse()
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "walsendlag:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "walsendlag:", err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	switch {
	case c.rows < 0 || c.indexes < -1 || c.indexes > 8:
		return errors.New("--rows must be >= 0 and --indexes between -1 and 8")
	case c.every <= 0 || c.small <= 0 || c.duration <= 0:
		return errors.New("--every, --small-every and --duration must be positive")
	}
	if c.batchURL == "" {
		c.batchURL = c.url
	}
	return nil
}

func run(ctx context.Context, c config) error {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP PUBLICATION IF EXISTS walsendlag; DROP TABLE IF EXISTS walsendlag_small;
		CREATE TABLE walsendlag_small (id bigserial PRIMARY KEY, payload text);
		CREATE PUBLICATION walsendlag FOR TABLE walsendlag_small WITH (publish = 'insert')`); err != nil {
		return fmt.Errorf("creating the small table: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP PUBLICATION IF EXISTS walsendlag; DROP TABLE IF EXISTS walsendlag_small`)
	bconn, err := pgx.Connect(ctx, c.batchURL)
	if err != nil {
		return err
	}
	defer bconn.Close(ctx)
	if _, err := bconn.Exec(ctx, batchDDL(c.indexes)); err != nil {
		return fmt.Errorf("creating the batch table: %w", err)
	}
	defer bconn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS walsendlag_batch`)

	rc, err := startStream(ctx, c.url)
	if err != nil {
		return err
	}
	defer rc.Close(context.WithoutCancel(ctx))
	stop := time.Now().Add(c.duration)
	var wg sync.WaitGroup
	var smallErr, batchErr error
	var calls []float64
	wg.Go(func() { calls, smallErr = smallCommits(ctx, c, stop) })
	if c.rows > 0 {
		wg.Go(func() { batchErr = batches(ctx, bconn, c, stop) })
	}
	sent, received, err := receive(ctx, rc, stop.Add(2*time.Second))
	wg.Wait()
	if err = errors.Join(err, smallErr, batchErr); err != nil {
		return err
	}
	fmt.Printf("rows %d, indexes %d, every %s, batches in %s\n", c.rows, c.indexes, c.every, sameOrOther(c))
	fmt.Printf("commit call:          %s\n", summary(calls))
	fmt.Printf("commit -> sent:       %s\n", summary(sent))
	fmt.Printf("commit -> received:   %s\n", summary(received))
	return nil
}

func batchDDL(indexes int) string {
	pk := " PRIMARY KEY"
	if indexes < 0 {
		pk = ""
	}
	ddl := []string{"DROP TABLE IF EXISTS walsendlag_batch",
		"CREATE TABLE walsendlag_batch (id bigserial" + pk + ", account text, endpoint text, status int, at timestamptz, excerpt text)"}
	cols := []string{"account, at", "endpoint, at", "status, at", "at", "account, status, at", "endpoint, status, at", "excerpt", "account, endpoint"}
	for i := range max(indexes, 0) {
		ddl = append(ddl, "CREATE INDEX ON walsendlag_batch ("+cols[i]+")")
	}
	return strings.Join(ddl, "; ")
}

func sameOrOther(c config) string {
	if c.rows == 0 {
		return "no database (no batches)"
	}
	if c.batchURL == c.url {
		return "the same database"
	}
	return "another database"
}

func startStream(ctx context.Context, url string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	rc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	slot := fmt.Sprintf("walsendlag_%d", time.Now().UnixNano())
	if _, err := pglogrepl.CreateReplicationSlot(ctx, rc, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true}); err != nil {
		rc.Close(ctx)
		return nil, fmt.Errorf("creating the slot: %w", err)
	}
	err = pglogrepl.StartReplication(ctx, rc, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walsendlag'"}})
	if err != nil {
		rc.Close(ctx)
		return nil, fmt.Errorf("starting replication: %w", err)
	}
	return rc, nil
}

// smallCommits commits one row every c.small until stop and returns how
// long each commit call took, in ms.
func smallCommits(ctx context.Context, c config, stop time.Time) ([]float64, error) {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	t := time.NewTicker(c.small)
	defer t.Stop()
	var calls []float64
	for time.Now().Before(stop) {
		<-t.C
		start := time.Now()
		if _, err := conn.Exec(ctx, `INSERT INTO walsendlag_small (payload) VALUES (repeat('x', 200))`); err != nil {
			return nil, err
		}
		calls = append(calls, ms(time.Since(start)))
	}
	return calls, nil
}

// batches inserts c.rows rows in one statement every c.every until stop.
func batches(ctx context.Context, conn *pgx.Conn, c config, stop time.Time) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for time.Now().Before(stop) {
		<-t.C
		_, err := conn.Exec(ctx, `INSERT INTO walsendlag_batch (account, endpoint, status, at, excerpt)
			SELECT 'acct_'||(g%200), 'ep_'||(g%1000), 200, now(), repeat(md5(g::text), 8) FROM generate_series(1, $1) g`, c.rows)
		if err != nil {
			return err
		}
	}
	return nil
}

// receive reads the stream until deadline and returns, per commit message,
// the WAL sender's send time and the arrival, each after the commit
// timestamp, in ms.
func receive(ctx context.Context, rc *pgconn.PgConn, deadline time.Time) (sent, received []float64, err error) {
	var last pglogrepl.LSN
	status := time.Now()
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Second))
		msg, err := rc.ReceiveMessage(rctx)
		cancel()
		if pgconn.Timeout(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) > 0 && cd.Data[0] == pglogrepl.XLogDataByteID {
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return nil, nil, err
			}
			lm, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return nil, nil, err
			}
			if cm, ok := lm.(*pglogrepl.CommitMessage); ok {
				received = append(received, ms(time.Since(cm.CommitTime)))
				sent = append(sent, ms(x.ServerTime.Sub(cm.CommitTime)))
				last = cm.TransactionEndLSN
			}
		}
		if time.Since(status) > time.Second {
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, rc, pglogrepl.StandbyStatusUpdate{WALWritePosition: last}); err != nil {
				return nil, nil, err
			}
			status = time.Now()
		}
	}
	return sent, received, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summary(v []float64) string {
	if len(v) == 0 {
		return "none"
	}
	slices.Sort(v)
	q := func(p float64) float64 { return v[int(p*float64(len(v)-1))] }
	return fmt.Sprintf("n=%d p50=%.1f p99=%.1f p99.9=%.1f max=%.1f ms", len(v), q(.5), q(.99), q(.999), v[len(v)-1])
}

package attemptlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgcpu"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/attemptlog"
)

// BenchmarkWriterPostgresWrites measures what one delivered webhook costs
// Postgres: rows written to hookd's tables (pg_stat_user_tables, schema
// webhooks: inserts + updates + deletes), rows written anywhere in the
// database (pg_stat_database, which adds the writer's per-session staging
// table and catalog rows; none of it is WAL-logged) and WAL bytes
// (pg_current_wal_lsn before and after). b.N deliveries go through a running
// writer as the pipeline produces them: in chunks, each chunk's delivery
// records (the router's) and then its attempt records (the dispatcher's, one
// 200 each). mode=live produces while the writer runs; mode=backlog
// produces everything first (a writer catching up after a restart): its
// time per op and deliveries/s are the writer's own (production untimed).
// pg-CPU-µs/delivery is the Postgres server's CPU (every backend) over the
// timed part, when the server runs on this machine. The timed part ends
// with one fold of the hourly rollup's staged deltas (a writer folds every
// FoldInterval), so their whole cost is counted.
//
//	scripts/test.sh -run '^$' -bench BenchmarkWriterPostgresWrites -benchtime 5000x ./store/attemptlog/
func BenchmarkWriterPostgresWrites(b *testing.B) {
	for _, mode := range []string{"live", "backlog"} {
		b.Run("mode="+mode, func(b *testing.B) { benchWrites(b, mode == "live") })
	}
}

const benchChunk = 100

type pgCounters struct{ tableRows, dbRows, walLSN int64 }

func benchWrites(b *testing.B, live bool) {
	tcfg := topics.Config{Partitions: 3}
	names := topics.NamesFor(tcfg)
	kafka := kafkatest.NewProvisioned(b, tcfg)
	producer := kafka.Client(b, kgo.ProducerLinger(0))
	db := pgtest.New(b)
	ctx := context.Background()
	const endpoints = 1000 // as hookbench
	for i := range endpoints {
		if _, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
			VALUES ($1, 'acct_1', 'https://example.com/hook', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, fmt.Sprintf("ep%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	db.Store.Close() // its sessions' statistics are flushed when they end
	reader, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Close(ctx)
	before := readCounters(b, reader, db.Name)

	st, err := store.Open(ctx, store.Config{DatabaseURL: db.URL}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := attemptlog.New(attemptlog.Config{Topic: names.Attempts, DeliveriesTopic: names.Deliveries,
		OpsTopic: names.Ops, EventsTopic: names.Events}, attemptlog.Deps{
		Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(kafka.Addrs...), kgo.FetchMaxWait(50 * time.Millisecond)},
	})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := func() { go func() { done <- w.Run(wctx) }() }

	now := time.Now().UTC()
	if live {
		// The writer joins its group and reads one delivery before the
		// measure starts; the counters include that one (1/b.N).
		start()
		dels, atts := benchChunkRecords(b, names, now, -1, 0, endpoints)
		if err := producer.ProduceSync(ctx, append(dels, atts...)...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		waitDelivered(b, reader, reg, 1)
	}
	pgMeter := pgMeter(b, db.URL)
	b.ResetTimer()
	if !live {
		b.StopTimer()
	}
	cpuBefore := pgMeter.Read()
	for lo := 0; lo < b.N; lo += benchChunk {
		dels, atts := benchChunkRecords(b, names, now, lo, min(lo+benchChunk, b.N), endpoints)
		if err := producer.ProduceSync(ctx, dels...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		if err := producer.ProduceSync(ctx, atts...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	var procBefore time.Duration
	if !live {
		cpuBefore = pgMeter.Read()
		procBefore = processCPU(b)
		b.StartTimer()
		start()
	}
	if live {
		waitDelivered(b, reader, reg, b.N+1)
	} else {
		waitDelivered(b, reader, reg, b.N)
	}
	// The hourly rollup's deltas the batches staged are folded inside the
	// measure, so that the fold's rows and CPU count (the writer folds every
	// 5 s, once or not at all in a run this short, and when it stops).
	if _, err := st.FoldAttemptHours(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpuAfter := pgMeter.Read()
	procCPU := processCPU(b) - procBefore
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	st.Close()
	after := readCounters(b, reader, db.Name)
	n := float64(b.N)
	b.ReportMetric(float64(after.tableRows-before.tableRows)/n, "rows/delivery")
	b.ReportMetric(float64(after.dbRows-before.dbRows)/n, "db-rows/delivery")
	b.ReportMetric(float64(after.walLSN-before.walLSN)/n, "WAL-B/delivery")
	if cpu, _ := pgcpu.PerDelivery(cpuBefore, cpuAfter, b.N); cpu > 0 {
		b.ReportMetric(cpu, "pg-CPU-µs/delivery")
	}
	if !live {
		b.ReportMetric(float64(procCPU.Microseconds())/n, "writer-CPU-µs/delivery")
		b.ReportMetric(n/b.Elapsed().Seconds(), "deliveries/s")
	}
}

// pgMeter measures the test server's CPU, or nothing if it is not local.
func pgMeter(b *testing.B, url string) pgcpu.Meter {
	pm, err := pgcpu.PostmasterPID(context.Background(), url)
	if err != nil {
		b.Logf("Postgres CPU not measured: %v", err)
		return pgcpu.Meter{}
	}
	return pgcpu.Meter{Postmaster: pm}
}

// waitDelivered waits until the log shows n deliveries delivered. It
// follows the writer's hookd_attempts_total (counted after each commit)
// and counts the rows once that says so: counting them every 10ms cost
// Postgres about 20 µs per delivery of the timed part.
func waitDelivered(b *testing.B, reader *pgx.Conn, reg *prometheus.Registry, n int) {
	wait.For(b, 5*time.Minute, "the writer to log every delivery", func() bool { return loggedDelivered(b, reg) >= n })
	wait.For(b, 30*time.Second, "every delivery delivered in the log", func() bool {
		var got int
		if err := reader.QueryRow(context.Background(), `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'`).Scan(&got); err != nil {
			b.Fatal(err)
		}
		return got == n
	})
}

// benchChunkRecords are deliveries [lo, hi): their delivery records and
// their first attempts, each answered 200.
func benchChunkRecords(b *testing.B, names topics.Names, now time.Time, lo, hi, endpoints int) (dels, atts []*kgo.Record) {
	for i := lo; i < hi; i++ {
		ep, evt := fmt.Sprintf("ep%d", (i+endpoints)%endpoints), fmt.Sprintf("evt_%07d", i)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep,
			Account: "acct_1", EventCreated: now, Attempt: 1, Body: []byte(`{"id":"` + evt + `"}`)}
		dels = append(dels, d.Record(names.Deliveries))
		started := now.Add(time.Duration(i) * 150 * time.Microsecond) // ~6.7k deliveries/s, as hookbench
		a := &attempt.Record{AttemptID: fmt.Sprintf("att_%07d", i), DeliveryID: d.ID, EventID: evt, EventType: d.EventType,
			EndpointID: ep, Account: "acct_1", EventCreated: now, Attempt: 1, Tier: names.Deliveries,
			StartedAt: started, Duration: 12 * time.Millisecond, StatusCode: 200, Outcome: attempt.OutcomeDelivered,
			NextAction: attempt.NextDone, ResponseExcerpt: "ok", Destination: "203.0.113.7:443",
			BodySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
		kr, err := a.KafkaRecord(names.Attempts)
		if err != nil {
			b.Fatal(err)
		}
		atts = append(atts, kr)
	}
	return dels, atts
}

// readCounters reads the write counters of database name once no other
// session is connected to it: a session flushes its statistics before it
// leaves pg_stat_activity, so then they are complete.
func readCounters(b *testing.B, conn *pgx.Conn, name string) pgCounters {
	ctx := context.Background()
	wait.For(b, 30*time.Second, "the other sessions of "+name+" to end", func() bool {
		var others int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
			name).Scan(&others); err != nil {
			b.Fatal(err)
		}
		return others == 0
	})
	var c pgCounters
	if err := conn.QueryRow(ctx, `SELECT
			(SELECT COALESCE(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = 'webhooks'),
			(SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1),
			(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`, name).Scan(&c.tableRows, &c.dbRows, &c.walLSN); err != nil {
		b.Fatal(err)
	}
	return c
}

// loggedDelivered is the writer's count of delivered attempts logged.
func loggedDelivered(b *testing.B, reg *prometheus.Registry) int {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "hookd_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "delivered" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(n)
}

// processCPU is the user and system CPU time of this process so far: in
// backlog mode, the writer's (and the in-process broker's fetches).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

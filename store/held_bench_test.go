package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// heldBenchRows is how many delivery rows hold an expired attempt, and as
// many hold one of the kept window, over heldBenchEndpoints endpoints.
const (
	heldBenchRows      = 100_000
	heldBenchEndpoints = 1000
)

// BenchmarkClearExpiredHeldAttempts times erasing heldBenchRows expired
// held attempts (ns/op is one whole clearing; run it with -benchtime=1x)
// and reports the WAL it writes per row, then times a pass with nothing
// due (idle-pass-ms) over as many kept held attempts.
func BenchmarkClearExpiredHeldAttempts(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	old := t0.AddDate(0, 0, -40)
	if _, err := db.Store.MaintainAttemptPartitions(ctx, old, 45, 60*24*time.Hour); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Store.MaintainAttemptPartitions(ctx, t0, 3, 30*24*time.Hour); err != nil {
		b.Fatal(err)
	}
	insertHeld(b, db, "kept", t0.Add(-time.Hour))
	for b.Loop() {
		b.StopTimer()
		insertHeld(b, db, "old", old)
		lsn := walLSN(b, db)
		b.StartTimer()
		n, err := db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{})
		b.StopTimer()
		if err != nil || n != heldBenchRows {
			b.Fatalf("cleared %d rows, err %v", n, err)
		}
		b.ReportMetric(float64(walSince(b, db, lsn))/heldBenchRows, "WAL-B/row")
		b.ReportMetric(float64(heldBenchRows)/b.Elapsed().Seconds(), "rows/s")
		for _, q := range []string{`DELETE FROM webhooks.deliveries WHERE id LIKE 'old%'`, `VACUUM webhooks.deliveries`} {
			if _, err := db.Store.Pool().Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		if n, err := db.Store.ClearExpiredHeldAttempts(ctx, store.ClearHeldParams{}); err != nil || n != 0 {
			b.Fatalf("idle pass cleared %d rows, err %v", n, err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "idle-pass-ms")
		b.StartTimer()
	}
}

// insertHeld inserts heldBenchRows delivery rows holding an attempt that
// started at from (plus a second per row), like the attempt log writer
// leaves them: a delivered first attempt with a response excerpt.
func insertHeld(b *testing.B, db *pgtest.DB, prefix string, from time.Time) {
	b.Helper()
	_, err := db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id,
		account, event_type, status, attempts, last_status_code, event_created_at, delivered_at, last_attempt_at,
		a_id, a_attempt, a_tier, a_started_at, a_duration_ms, a_status_code, a_outcome, a_response_excerpt,
		a_next_action, a_destination)
	SELECT $1 || i, 'evt_' || $1 || i, 'ep_' || (i % $4), 'acct_1', 'invoice.paid', 'delivered', 1, 200, t, t, t,
		$1 || i || '-a1', 1, 'webhooks.deliveries', t, 25, 200, 'delivered', repeat('{"ok":true}', 20),
		'done', 'https://receiver.example/hooks/' || (i % $4)
	FROM generate_series(1, $3::int) i, LATERAL (SELECT $2::timestamptz + i * interval '1 second' AS t) s`,
		prefix, from, heldBenchRows, heldBenchEndpoints)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Store.Pool().Exec(context.Background(), `VACUUM ANALYZE webhooks.deliveries`); err != nil {
		b.Fatal(err)
	}
}

func walLSN(b *testing.B, db *pgtest.DB) string {
	b.Helper()
	var lsn string
	if err := db.Store.Pool().QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

func walSince(b *testing.B, db *pgtest.DB, lsn string) int64 {
	b.Helper()
	var n int64
	if err := db.Store.Pool().QueryRow(context.Background(),
		`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// BenchmarkPortalChartStaged measures what the staged rollup deltas (not
// folded yet) cost a chart read: 1000 endpoints, 30 batches of 1500
// attempts staged (what a writer stages in ~5 s at ~9,000 deliveries/s, its
// fold interval), then the same rows folded. A 30-day hourly chart of 3
// endpoints.
//
//	pg_virtualenv -t -- go test -run '^$' -bench PortalChartStaged ./store/
func BenchmarkPortalChartStaged(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	const endpoints, batches, size = 1000, 30, 1500
	addEndpoints(b, db, endpoints)
	now := time.Now().UTC()
	seq := 0
	for range batches {
		recs := make([]*attempt.Record, size)
		for j := range recs {
			seq++
			recs[j] = rec(fmt.Sprintf("s%d", seq), fmt.Sprintf("ep%d", seq%endpoints), 1, attempt.OutcomeDelivered, attempt.NextDone)
			recs[j].StartedAt, recs[j].Duration = now.Add(-time.Duration(seq)*time.Millisecond), time.Duration(5+seq%200)*time.Millisecond
		}
		if _, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	start := now.Truncate(time.Hour).Add(-29 * 24 * time.Hour)
	var bounds []time.Time
	for t := start; !t.After(now.Truncate(time.Hour).Add(time.Hour)); t = t.Add(time.Hour) {
		bounds = append(bounds, t)
	}
	p := store.PortalChartParams{Account: "acct_1", EndpointIDs: []string{"ep1", "ep2", "ep3"}, Bounds: bounds}
	read := func(b *testing.B) {
		for b.Loop() {
			got, err := db.Store.PortalChart(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			var n int64
			for _, c := range got {
				n += c.Delivered
			}
			if n != 3*batches*size/endpoints {
				b.Fatalf("charted %d deliveries, want %d", n, 3*batches*size/endpoints)
			}
		}
	}
	b.Run("staged", read)
	if _, err := db.Store.FoldAttemptHours(ctx); err != nil {
		b.Fatal(err)
	}
	b.Run("folded", read)
}

// BenchmarkFoldAttemptHours measures one fold of what a writer stages
// between two (30 batches of 1500 attempts at 1000 endpoints, latencies
// spread over 18 buckets per endpoint), into a rollup that holds those
// hours already (the upserts merge histograms).
//
//	pg_virtualenv -t -- go test -run '^$' -bench FoldAttemptHours -benchtime 5x ./store/
func BenchmarkFoldAttemptHours(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	const endpoints, batches, size = 1000, 30, 1500
	addEndpoints(b, db, endpoints)
	now := time.Now().UTC()
	seq := 0
	stage := func() {
		for range batches {
			recs := make([]*attempt.Record, size)
			for j := range recs {
				seq++
				recs[j] = rec(fmt.Sprintf("f%d", seq), fmt.Sprintf("ep%d", seq%endpoints), 1, attempt.OutcomeDelivered, attempt.NextDone)
				// 5-27 ms, 18 latency buckets per endpoint in a fold, as
				// hookbench's receivers answering in 5 ms give (13 per
				// endpoint). 5+seq%200 followed the endpoint (seq%endpoints):
				// one bucket each, and a fold looked half as costly.
				recs[j].StartedAt, recs[j].Duration = now.Add(-time.Duration(seq%1000)*time.Millisecond), time.Duration(5+(seq/endpoints)%23)*time.Millisecond
			}
			if _, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Now: now}); err != nil {
				b.Fatal(err)
			}
		}
	}
	stage()
	if _, err := db.Store.FoldAttemptHours(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		stage()
		b.StartTimer()
		res, err := db.Store.FoldAttemptHours(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Batches != batches {
			b.Fatalf("folded %d batches, want %d", res.Batches, batches)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batches*size), "µs/attempt")
}

// addEndpoints registers endpoints ep0 .. ep<n-1> of acct_1.
func addEndpoints(b *testing.B, db *pgtest.DB, n int) {
	b.Helper()
	for i := range n {
		if _, err := db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.endpoints (id, account, url, secrets)
			VALUES ($1, 'acct_1', 'https://example.com/hook', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, fmt.Sprintf("ep%d", i)); err != nil {
			b.Fatal(err)
		}
	}
}

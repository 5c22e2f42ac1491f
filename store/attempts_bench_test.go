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

// BenchmarkWriteAttempts measures the attempt log's write rate per batch
// size; batch=1 is the baseline (one transaction per attempt) the batched
// sizes are compared with, in records/s and in write time per attempt (the
// writer's batches hold up to ~2,500 attempts: attemptlog.Config.MaxBatch).
func BenchmarkWriteAttempts(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	for i := range 100 {
		_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.endpoints (id, account, url, secrets)
			VALUES ($1, 'acct_1', 'https://example.com/hook', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, fmt.Sprintf("ep%d", i))
		if err != nil {
			b.Fatal(err)
		}
	}
	seq := 0
	for _, size := range []int{1, 100, 500, 1000, 2000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			for b.Loop() {
				recs := make([]*attempt.Record, size)
				for j := range recs {
					seq++
					o, next := attempt.OutcomeDelivered, attempt.NextDone
					if seq%3 == 0 {
						o, next = attempt.OutcomeRetry, attempt.NextRetry
					}
					recs[j] = rec(fmt.Sprintf("b%d", seq), fmt.Sprintf("ep%d", seq%100), 1, o, next)
				}
				if _, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Now: t0, DisableAfter: 72 * time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*size), "µs/attempt")
		})
	}
}

package store

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// The hourly rollup of the attempt log (webhooks.attempt_hours, schema
// version 18): per account, endpoint and UTC hour, the delivered and
// failed attempts and a latency histogram (bigint[] of counts indexed by
// latency bucket + 1). WriteAttempts adds one row of deltas per batch to
// webhooks.attempt_hours_pending (schema version 24), in the transaction
// that appends the attempts; FoldAttemptHours, which the attempt-log writer
// runs every few seconds, moves them into the rollup in a short transaction
// of its own. PortalChart and PortalEndpointStats read both (the view
// webhooks.attempt_hours_all), so the deltas not folded yet are charted too.

// bucketsOf renders, for the attempts selected by where from source, per
// account, endpoint, hour and latency bucket, the delivered and failed
// counts: the rollup's deltas.
func bucketsOf(account, source, where string) string {
	return `SELECT ` + account + ` AS account, endpoint_id, date_trunc('hour', started_at, 'UTC') AS hour,
		webhooks.latency_bucket(duration_ms) AS bucket,
		count(*) FILTER (WHERE outcome IN ` + sqlSuccess + `) AS delivered,
		count(*) FILTER (WHERE outcome IN ` + sqlFailures + `) AS failed
	FROM ` + source + `
	WHERE ` + where + ` (outcome IN ` + sqlSuccess + ` OR outcome IN ` + sqlFailures + `)
	GROUP BY 1, 2, 3, 4`
}

// hoursOf sums deltas (rows of bucketsOf's columns) per account, endpoint
// and hour, in key order.
func hoursOf(deltas string) string {
	return `SELECT account, endpoint_id, hour, sum(delivered)::bigint AS delivered, sum(failed)::bigint AS failed,
	webhooks.hist(bucket, delivered + failed) AS latency
FROM (` + deltas + `) b
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3`
}

// stageAttemptHours records the fresh attempts of a staged batch, under the
// account they were logged under (as the attempt log keeps them), as one
// row of deltas: one row per batch however many hours and endpoints it
// touches, and no row lock another writer could wait on (issue 15: the
// upsert of every touched hour in this transaction cost 0.39 rows and ~25 µs
// of Postgres CPU per delivery at 1000 endpoints).
var stageAttemptHours = `INSERT INTO webhooks.attempt_hours_pending (deltas)
SELECT array_agg(ROW(account, endpoint_id, hour, bucket, delivered, failed)::webhooks.attempt_hour_delta)
FROM (` + bucketsOf("account", "hookd_attempts_in", "fresh AND") + `) b
HAVING count(*) > 0`

// foldAttemptHours moves up to $1 rows of deltas, the oldest, into the
// rollup and returns how many it took. The deltas are summed per bucket
// before the histograms are built: webhooks.hist adds one bucket per call
// (PL/pgSQL), and the batches of a fold repeat the same endpoints and
// buckets (BenchmarkFoldAttemptHours: 62 -> 31 ms). SKIP LOCKED: two
// writers folding at once take different rows rather than wait; the
// rollup's rows are upserted in key order, so two folds adding to the same
// hours wait rather than deadlock.
var foldAttemptHours = `WITH taken AS (
	DELETE FROM webhooks.attempt_hours_pending WHERE id = ANY (ARRAY(
		SELECT id FROM webhooks.attempt_hours_pending ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
	RETURNING deltas
), folded AS (
	INSERT INTO webhooks.attempt_hours AS h (account, endpoint_id, hour, delivered, failed, latency)
	` + hoursOf(`SELECT d.account, d.endpoint_id, d.hour, d.bucket, sum(d.delivered)::bigint AS delivered,
		sum(d.failed)::bigint AS failed
		FROM taken, unnest(taken.deltas) d GROUP BY 1, 2, 3, 4`) + `
	ON CONFLICT (account, endpoint_id, hour) DO UPDATE SET
		delivered = h.delivered + EXCLUDED.delivered,
		failed = h.failed + EXCLUDED.failed,
		latency = webhooks.hist_merge(h.latency, EXCLUDED.latency)
	RETURNING 1
)
SELECT (SELECT count(*) FROM taken), (SELECT count(*) FROM folded)`

// foldChunk bounds the rows of deltas one fold transaction takes: a
// backlog (no writer folded for a while) is folded in several short
// transactions rather than one long one.
const foldChunk = 200

// FoldResult says what FoldAttemptHours did.
type FoldResult struct {
	// Batches is the rows of deltas (one per attempt batch) folded.
	Batches int64
	// Hours is the rollup rows upserted.
	Hours int64
}

// FoldAttemptHours moves the hourly rollup's pending deltas (one row per
// attempt batch written) into webhooks.attempt_hours, in transactions of
// at most foldChunk batches, until none is left (rows other folds hold are
// left to them). Deltas move whole or not at all: after an error they are
// all still pending, and the next fold takes them.
func (s *Store) FoldAttemptHours(ctx context.Context) (FoldResult, error) {
	var res FoldResult
	for {
		var batches, hours int64
		if err := s.pool.QueryRow(ctx, foldAttemptHours, foldChunk).Scan(&batches, &hours); err != nil {
			return res, fmt.Errorf("folding the hourly attempt rollup: %s", oneLine(err))
		}
		res.Batches += batches
		res.Hours += hours
		if batches < foldChunk {
			return res, nil
		}
	}
}

// RebuildAttemptHours recomputes the hourly rollup from the attempt log,
// in one transaction, pending deltas included: what migration 18 does as
// its backfill. It is for repairs (rows written into the log by hand) and
// benchmarks that fill the log directly; the attempt-log writer keeps the
// rollup current itself.
func (s *Store) RebuildAttemptHours(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM webhooks.attempt_hours_pending`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM webhooks.attempt_hours`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhooks.attempt_hours (account, endpoint_id, hour, delivered, failed, latency) `+
			hoursOf(bucketsOf("COALESCE(account, '')", "webhooks.attempts", "")))
		return err
	})
	if err != nil {
		return fmt.Errorf("rebuilding the hourly attempt rollup: %s", oneLine(err))
	}
	return nil
}

// latencyBucketBounds are the [lo, hi) ms of latency bucket b, as
// webhooks.latency_bucket assigns them: one ms each below 16, then 8 per
// doubling.
func latencyBucketBounds(b int) (lo, hi float64) {
	if b < 16 {
		return float64(b), float64(b)
	}
	return 16 * math.Exp2(float64(b-16)/8), 16 * math.Exp2(float64(b-15)/8)
}

// latencyHist is a latency histogram: counts by latency bucket.
type latencyHist map[int]int64

// add adds a histogram as the rollup stores it (counts indexed by bucket).
func (h latencyHist) add(counts []int64) {
	for b, n := range counts {
		if n != 0 {
			h[b] += n
		}
	}
}

// percentile estimates what percentile_cont(p) would give over the
// durations counted in h: the k-th duration is taken as the middle of its
// share of its bucket (exact below 16 ms), and p between two ranks
// interpolates as percentile_cont does. Zero when h is empty.
func (h latencyHist) percentile(p float64) time.Duration {
	buckets := make([]int, 0, len(h))
	var n int64
	for b, c := range h {
		if c > 0 {
			buckets = append(buckets, b)
			n += c
		}
	}
	if n == 0 {
		return 0
	}
	sort.Ints(buckets)
	nth := func(k int64) float64 {
		var below int64
		for _, b := range buckets {
			c := h[b]
			if k < below+c {
				lo, hi := latencyBucketBounds(b)
				return lo + (float64(k-below)+0.5)/float64(c)*(hi-lo)
			}
			below += c
		}
		lo, _ := latencyBucketBounds(buckets[len(buckets)-1])
		return lo
	}
	rank := p * float64(n-1)
	k := int64(math.Floor(rank))
	ms := nth(k)
	if frac := rank - float64(k); frac > 0 {
		ms += frac * (nth(k+1) - ms)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

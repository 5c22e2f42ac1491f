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
// latency bucket + 1). WriteAttempts adds each batch's new attempts in its
// own transaction; PortalChart and PortalEndpointStats read the rollup.

// hoursOf renders the rollup rows of the attempts selected by where from
// source: per account, endpoint and hour, counts and histogram.
func hoursOf(account, source, where string) string {
	return `SELECT account, endpoint_id, hour, sum(delivered)::bigint AS delivered, sum(failed)::bigint AS failed,
	webhooks.hist(bucket, delivered + failed) AS latency
FROM (
	SELECT ` + account + ` AS account, endpoint_id, date_trunc('hour', started_at, 'UTC') AS hour,
		webhooks.latency_bucket(duration_ms) AS bucket,
		count(*) FILTER (WHERE outcome IN ` + sqlSuccess + `) AS delivered,
		count(*) FILTER (WHERE outcome IN ` + sqlFailures + `) AS failed
	FROM ` + source + `
	WHERE ` + where + ` (outcome IN ` + sqlSuccess + ` OR outcome IN ` + sqlFailures + `)
	GROUP BY 1, 2, 3, 4
) b
GROUP BY 1, 2, 3`
}

// addAttemptHours adds the fresh attempts of a staged batch to the rollup,
// under the account they were logged under (as the attempt log keeps
// them). Rows are upserted in key order, so two writers adding to the
// same hours lock them in the same order and wait rather than deadlock.
var addAttemptHours = `INSERT INTO webhooks.attempt_hours AS h (account, endpoint_id, hour, delivered, failed, latency)
` + hoursOf("account", "hookd_attempts_in", "fresh AND") + `
ORDER BY 1, 2, 3
ON CONFLICT (account, endpoint_id, hour) DO UPDATE SET
	delivered = h.delivered + EXCLUDED.delivered,
	failed = h.failed + EXCLUDED.failed,
	latency = webhooks.hist_merge(h.latency, EXCLUDED.latency)`

// RebuildAttemptHours recomputes the hourly rollup from the attempt log,
// in one transaction: what migration 18 does as its backfill. It is for
// repairs (rows written into the log by hand) and benchmarks that fill the
// log directly; the attempt-log writer keeps the rollup current itself.
func (s *Store) RebuildAttemptHours(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM webhooks.attempt_hours`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhooks.attempt_hours (account, endpoint_id, hour, delivered, failed, latency) `+
			hoursOf("COALESCE(account, '')", "webhooks.attempts", ""))
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

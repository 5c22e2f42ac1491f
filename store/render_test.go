package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// WriteAttempts renders a batch in which no delivery has two attempts
// without the window functions that pick each delivery's newest attempt
// (issue 15). The same random history of batches (first attempts, retries,
// dead letters, deferrals, redeliveries, pending records before and with
// their attempts, another account's record), written both ways, leaves the
// same delivery rows and the same attempt log.
func TestWriteAttemptsRendersOneAttemptBatchesAsTheGeneralCase(t *testing.T) {
	t.Parallel()
	general, oneEach := pgtest.New(t), pgtest.New(t)
	store.RenderWindowsAlways(general.Store)
	for _, db := range []*pgtest.DB{general, oneEach} {
		for e := range 4 {
			addEndpoint(t, db, fmt.Sprintf("ep%d", e))
		}
	}
	rng := rand.New(rand.NewPCG(15, 13))
	next := map[string]int{} // next attempt number per delivery
	outcomes := []struct {
		o attempt.Outcome
		n attempt.NextAction
	}{
		{attempt.OutcomeDelivered, attempt.NextDone}, {attempt.OutcomeRetry, attempt.NextRetry},
		{attempt.OutcomeRetry, attempt.NextDeadLetter}, {attempt.OutcomeDeferred, attempt.NextRetry},
		{attempt.OutcomeGone, attempt.NextDeadLetter},
	}
	var written []*attempt.Record
	for batch := range 40 {
		var recs []*attempt.Record
		var pending []store.PendingDelivery
		seen := map[string]bool{}
		for range 1 + rng.IntN(12) {
			d := fmt.Sprintf("dlv_%02d", rng.IntN(30))
			if seen[d] {
				continue // one attempt per delivery and batch
			}
			seen[d] = true
			switch {
			case rng.IntN(8) == 0 && len(written) > 0: // a redelivered record
				recs = append(recs, written[rng.IntN(len(written))])
				continue
			case rng.IntN(6) == 0: // only its pending record
				r := rec(d, fmt.Sprintf("ep%d", rng.IntN(4)), 1, attempt.OutcomeDelivered, attempt.NextDone)
				pending = append(pending, pendingOf(r))
				continue
			}
			next[d]++
			oc := outcomes[rng.IntN(len(outcomes))]
			r := rec(d, fmt.Sprintf("ep%d", len(d)%4), next[d], oc.o, oc.n)
			if rng.IntN(10) == 0 {
				r.Account = "acct_2" // not the endpoint's
			}
			if next[d] == 1 && rng.IntN(2) == 0 {
				pending = append(pending, pendingOf(r))
			}
			recs, written = append(recs, r), append(written, r)
		}
		now := t0.Add(time.Duration(batch) * time.Minute)
		for _, db := range []*pgtest.DB{general, oneEach} {
			_, err := db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: recs, Pending: pending,
				Now: now, DisableAfter: 72 * time.Hour})
			require.NoError(t, err, "batch %d", batch)
		}
	}
	require.Equal(t, dumpLog(t, general), dumpLog(t, oneEach))
}

// dumpLog is every delivery row and every attempt of the log, as text,
// without the times the rows were written.
func dumpLog(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Store.Pool().Query(context.Background(), `
		SELECT (to_jsonb(d) - 'created_at' - 'updated_at')::text FROM webhooks.deliveries d
		UNION ALL
		SELECT (to_jsonb(a) - 'logged_at')::text FROM webhooks.attempts a
		UNION ALL
		SELECT (to_jsonb(h))::text FROM webhooks.endpoint_health h
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(out), 40, "the history wrote rows")
	return out
}

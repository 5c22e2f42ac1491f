package cli_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// Issue 13 item 10: deliveries show said "attempts: 3" above 4 rows, as
// replay attempts restart at 1; the count now sums the rounds as the rows
// show them, and names rows that made no request.
func TestDeliveriesShowCountsEveryRound(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	dlv := delivery.ID("evt_r", "ep_r")
	base := attempt.Record{DeliveryID: dlv, EventID: "evt_r", EventType: "invoice.paid", EndpointID: "ep_r", Account: "acct_r",
		EventCreated: now, Tier: "webhooks.deliveries", Duration: 10 * time.Millisecond}
	at := func(id string, n int, min int, outcome attempt.Outcome, next attempt.NextAction, replayID string) *attempt.Record {
		r := base
		r.AttemptID, r.Attempt, r.StartedAt, r.Outcome, r.NextAction, r.ReplayID = id, n, now.Add(time.Duration(min)*time.Minute), outcome, next, replayID
		if outcome == attempt.OutcomeRetry {
			r.StatusCode, r.ErrorClass = 503, "http_5xx"
		}
		if next == attempt.NextRetry {
			r.NextDueAt = r.StartedAt.Add(time.Second)
		}
		if next == attempt.NextDeadLetter {
			r.DLQ, r.DeadReason = &attempt.Position{Topic: "webhooks.dlq", Partition: 0, Offset: int64(min)}, "retries_exhausted"
		}
		if outcome == attempt.OutcomeDelivered {
			r.StatusCode = 200
		}
		return &r
	}
	recs := []*attempt.Record{
		at("a1", 1, 0, attempt.OutcomeRetry, attempt.NextRetry, ""),
		at("a2d", 2, 1, attempt.OutcomeDeferred, attempt.NextRetry, ""),
		at("a2", 2, 2, attempt.OutcomeRetry, attempt.NextRetry, ""),
		at("a3", 3, 3, attempt.OutcomeRetry, attempt.NextDeadLetter, ""),
		at("x1", 1, 10, attempt.OutcomeRetry, attempt.NextDeadLetter, "rpl_x"),
		at("y1", 1, 20, attempt.OutcomeDelivered, attempt.NextDone, "rpl_y"),
	}
	_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Now: now})
	require.NoError(t, err)
	d, err := db.Store.GetDelivery(ctx, store.AnyAccount, dlv)
	require.NoError(t, err)
	require.Equal(t, 5, d.Attempts, "the delivery row counts the attempts made, as show does (issue 32)")

	code, out, errOut := hookctl(t, db, "deliveries", "show", dlv)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, regexp.MustCompile(`attempts:\s+5 \(3 \+ 1 after replay rpl_x \+ 1 after replay rpl_y\); 1 row\(s\) below made no request`), out)
	require.Len(t, regexp.MustCompile(`(?m)^\d+\s+\d{4}-`).FindAllString(out, -1), 6, "six rows: five attempts and the deferred one")
}

package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// deliveryRowOf inserts a delivery row as the attempt-log writer would.
func deliveryRowOf(t *testing.T, db *pgtest.DB, id, event, ep, account, status string) {
	t.Helper()
	_, err := db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, status, event_created_at) VALUES ($1, $2, $3, $4, 'invoice.paid', $5, $6)`,
		id, event, ep, account, status, t0)
	require.NoError(t, err)
}

func attemptRowOf(t *testing.T, db *pgtest.DB, attemptID, deliveryID, ep string, account *string) {
	t.Helper()
	_, err := db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.attempts
		(attempt_id, delivery_id, event_id, endpoint_id, account, attempt, tier, started_at, duration_ms, outcome, next_action)
		VALUES ($1, $2, 'evt', $3, $4, 1, 'webhooks.deliveries', $5, 5, 'retry', 'retry')`, attemptID, deliveryID, ep, account, t0)
	require.NoError(t, err)
}

func ids[T any](xs []T, id func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

func deliveryIDs(ds []store.Delivery) []string {
	return ids(ds, func(d store.Delivery) string { return d.ID })
}

// Rows of account B under account A's endpoint id (left by id reuse before
// ids were kept, or forged) never show in A's delivery log.
func TestDeliveryLogIsScopedByAccount(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, st, "ep_shared", "acct_a"))
	deliveryRowOf(t, db, "dlv_a", "evt_1", "ep_shared", "acct_a", "pending")
	deliveryRowOf(t, db, "dlv_b", "evt_1", "ep_shared", "acct_b", "retrying")

	for _, p := range []store.ListDeliveriesParams{
		{EndpointID: "ep_shared"},
		{EndpointID: "ep_shared", Account: "acct_a"},
		{Account: "acct_a"},
	} {
		ds, err := st.ListDeliveries(ctx, p)
		require.NoError(t, err)
		require.Equal(t, []string{"dlv_a"}, deliveryIDs(ds), "%+v", p)
	}
	ds, err := st.ListDeliveries(ctx, store.ListDeliveriesParams{EndpointID: "ep_shared", Account: "acct_b"})
	require.NoError(t, err)
	require.Equal(t, []string{"dlv_b"}, deliveryIDs(ds), "an operator asking for B's rows gets them")

	_, err = st.GetDelivery(ctx, "acct_a", "dlv_b")
	require.ErrorIs(t, err, store.ErrNotFound)
	d, err := st.GetDelivery(ctx, "acct_b", "dlv_b")
	require.NoError(t, err)
	require.Equal(t, "acct_b", d.Account)
	d, err = st.GetDelivery(ctx, store.AnyAccount, "dlv_b")
	require.NoError(t, err)
	require.Equal(t, "acct_b", d.Account)

	ds, err = st.DeliveriesOfEvent(ctx, "acct_a", "evt_1")
	require.NoError(t, err)
	require.Equal(t, []string{"dlv_a"}, deliveryIDs(ds))
	ds, err = st.DeliveriesOfEvent(ctx, store.AnyAccount, "evt_1")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"dlv_a", "dlv_b"}, deliveryIDs(ds))

	// Attempts under A's delivery id: A's, B's (colliding id), and one
	// logged before attempts carried an account (it is the row's account's).
	acctA, acctB := "acct_a", "acct_b"
	attemptRowOf(t, db, "att_a", "dlv_a", "ep_shared", &acctA)
	attemptRowOf(t, db, "att_b", "dlv_a", "ep_shared", &acctB)
	attemptRowOf(t, db, "att_old", "dlv_a", "ep_shared", nil)
	as, err := st.AttemptsOfDelivery(ctx, "acct_a", "dlv_a", 0)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"att_a", "att_old"}, ids(as, func(a store.Attempt) string { return a.AttemptID }))
	as, err = st.AttemptsOfDelivery(ctx, "acct_b", "dlv_a", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"att_b"}, ids(as, func(a store.Attempt) string { return a.AttemptID }))
	_, err = st.AttemptsOfDelivery(ctx, store.AnyAccount, "dlv_a", 0)
	require.ErrorContains(t, err, "account is required")
}

// rec for account acct at endpoint ep.
func recOf(d, ep, acct string, n int, outcome attempt.Outcome, next attempt.NextAction) *attempt.Record {
	r := rec(d, ep, n, outcome, next)
	r.Account = acct
	return r
}

// Account B's attempts at an endpoint id that is A's never move A's state,
// and move B's delivery row only to dead (the dispatcher dead-letters them
// as account_mismatch), never to delivered.
func TestWriteAttemptsKeepsAccountsApart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, st, "ep_shared", "acct_a"))
	deliveryRowOf(t, db, "dlv_b", "evt_b", "ep_shared", "acct_b", "pending")
	deliveryRowOf(t, db, "dlv_a", "evt_a", "ep_shared", "acct_a", "pending")

	// B's delivery "delivered" by A's receiver, and a 410 from it.
	delivered := recOf("dlv_b", "ep_shared", "acct_b", 1, attempt.OutcomeDelivered, attempt.NextDone)
	gone := recOf("dlv_gone", "ep_shared", "acct_b", 1, attempt.OutcomeGone, attempt.NextDeadLetter)
	// B's record under A's delivery id (a colliding id).
	collide := recOf("dlv_a", "ep_shared", "acct_b", 1, attempt.OutcomeDelivered, attempt.NextDone)
	collide.AttemptID = "collide-a1"
	res := write(t, db, t0, delivered, gone, collide)
	require.Len(t, res.Inserted, 3, "every attempt is logged, under its own account")
	require.ElementsMatch(t, []store.AccountMismatch{
		{AttemptID: delivered.AttemptID, DeliveryID: "dlv_b", EndpointID: "ep_shared", Account: "acct_b", Owner: "acct_a"},
		{AttemptID: gone.AttemptID, DeliveryID: "dlv_gone", EndpointID: "ep_shared", Account: "acct_b", Owner: "acct_a"},
		{AttemptID: "collide-a1", DeliveryID: "dlv_a", EndpointID: "ep_shared", Account: "acct_b", Owner: "acct_a"},
	}, res.Mismatched)
	require.Empty(t, res.Disabled, "B's 410 does not disable A's endpoint")

	require.Equal(t, "pending", getDelivery(t, db, "dlv_b").Status, "never delivered by another account's receiver")
	require.Equal(t, "pending", getDelivery(t, db, "dlv_a").Status, "A's row untouched by B's record")
	require.Equal(t, "dead", getDelivery(t, db, "dlv_gone").Status, "B's own row may go dead")
	var health int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM webhooks.endpoint_health WHERE endpoint_id = 'ep_shared'`).Scan(&health))
	require.Zero(t, health, "A's endpoint health untouched")
	ep, err := st.GetEndpoint(ctx, "ep_shared")
	require.NoError(t, err)
	require.Equal(t, endpoint.StatusActive, ep.Status)
	require.True(t, ep.FailingSince.IsZero())
	as, err := st.AttemptsOfDelivery(ctx, "acct_a", "dlv_a", 0)
	require.NoError(t, err)
	require.Empty(t, as, "B's attempt is not in A's timeline")

	// The dispatcher's account_mismatch dead letter moves B's row to dead.
	dead := recOf("dlv_b", "ep_shared", "acct_b", 2, attempt.OutcomeSkipped, attempt.NextDeadLetter)
	dead.DeadReason = "account_mismatch"
	res = write(t, db, t0, dead)
	require.Len(t, res.Mismatched, 1)
	got := getDelivery(t, db, "dlv_b")
	require.Equal(t, "dead", got.Status)
	require.Equal(t, "account_mismatch", *got.DeadReason)

	// A's own attempts still move A's state; no mismatch reported.
	res = write(t, db, t0, recOf("dlv_a", "ep_shared", "acct_a", 1, attempt.OutcomeDelivered, attempt.NextDone))
	require.Empty(t, res.Mismatched)
	require.Equal(t, "delivered", getDelivery(t, db, "dlv_a").Status)
}

func TestWritePendingDeliveriesReportsMismatches(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, st, "ep_a", "acct_a"))
	deliveryRowOf(t, db, "dlv_taken", "evt_x", "ep_a", "acct_a", "delivered")

	ms, err := st.WritePendingDeliveries(ctx, []store.PendingDelivery{
		{ID: "dlv_ok", EventID: "evt_1", EndpointID: "ep_a", Account: "acct_a", EventType: "t", EventCreated: t0},
		{ID: "dlv_b", EventID: "evt_2", EndpointID: "ep_a", Account: "acct_b", EventType: "t", EventCreated: t0},
		{ID: "dlv_taken", EventID: "evt_x", EndpointID: "ep_b", Account: "acct_b", EventType: "t", EventCreated: t0},
	})
	require.NoError(t, err)
	require.Equal(t, []store.AccountMismatch{
		{DeliveryID: "dlv_b", EndpointID: "ep_a", Account: "acct_b", Owner: "acct_a"},
		{DeliveryID: "dlv_taken", EndpointID: "ep_b", Account: "acct_b", Owner: "acct_a"},
	}, ms)
	d, err := st.GetDelivery(ctx, store.AnyAccount, "dlv_taken")
	require.NoError(t, err)
	require.Equal(t, "acct_a", d.Account, "a row stays its account's")
	require.Equal(t, "delivered", d.Status)
	ds, err := st.ListDeliveries(ctx, store.ListDeliveriesParams{EndpointID: "ep_a"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"dlv_ok", "dlv_taken"}, deliveryIDs(ds), "B's row never lists under A's endpoint")

	// A re-read of the same good row reports nothing.
	ms, err = st.WritePendingDeliveries(ctx, []store.PendingDelivery{
		{ID: "dlv_ok", EventID: "evt_1", EndpointID: "ep_a", Account: "acct_a", EventType: "t", EventCreated: t0}})
	require.NoError(t, err)
	require.Empty(t, ms)
}

// A's first attempt and B's account_mismatch dead letter under the same
// delivery id in one batch (B's the newer): the delivery row is A's, moved
// by A's attempt and holding it, whether the batch creates the row or finds
// A's pending row; B's attempt is logged under B and moves nothing of A's.
func TestWriteAttemptsKeepsAccountsApartInOneBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := db.Store
	ctx := context.Background()
	require.NoError(t, createEndpoint(ctx, st, "ep_a", "acct_a"))
	deliveryRowOf(t, db, "dlv_pending", "evt-dlv_pending", "ep_a", "acct_a", "pending")

	var recs []*attempt.Record
	for _, id := range []string{"dlv_new", "dlv_pending"} {
		own := recOf(id, "ep_a", "acct_a", 1, attempt.OutcomeRetry, attempt.NextRetry)
		forged := recOf(id, "ep_a", "acct_b", 2, attempt.OutcomeSkipped, attempt.NextDeadLetter)
		forged.AttemptID, forged.DeadReason = "forged-"+id, "account_mismatch"
		recs = append(recs, own, forged)
	}
	res := write(t, db, t0, recs...)
	require.Len(t, res.Inserted, 4)
	require.ElementsMatch(t, []string{"forged-dlv_new", "forged-dlv_pending"},
		ids(res.Mismatched, func(m store.AccountMismatch) string { return m.AttemptID }))

	for _, id := range []string{"dlv_new", "dlv_pending"} {
		var account string
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT account FROM webhooks.deliveries WHERE id = $1`, id).Scan(&account))
		require.Equal(t, "acct_a", account, "%s stays A's", id)
		d := getDelivery(t, db, id)
		require.Equal(t, "retrying", d.Status, "%s moved by A's attempt, not by B's dead letter", id)
		require.Equal(t, 1, d.Attempts, id)
		as, err := st.AttemptsOfDelivery(ctx, "acct_a", id, 0)
		require.NoError(t, err)
		require.Equal(t, []string{id + "-a1"}, ids(as, func(a store.Attempt) string { return a.AttemptID }), id)
		as, err = st.AttemptsOfDelivery(ctx, "acct_b", id, 0)
		require.NoError(t, err)
		require.Equal(t, []string{"forged-" + id}, ids(as, func(a store.Attempt) string { return a.AttemptID }), id)
	}
}

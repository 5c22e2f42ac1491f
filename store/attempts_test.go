package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// rec is attempt n of delivery d to endpoint ep, started at t0 + n minutes.
func rec(d, ep string, n int, outcome attempt.Outcome, next attempt.NextAction) *attempt.Record {
	r := &attempt.Record{
		AttemptID: fmt.Sprintf("%s-a%d", d, n), DeliveryID: d, EventID: "evt-" + d, EventType: "invoice.paid",
		EndpointID: ep, Account: "acct_1", EventCreated: t0, Attempt: n, Tier: "webhooks.deliveries",
		StartedAt: t0.Add(time.Duration(n) * time.Minute), Duration: 25 * time.Millisecond,
		Outcome: outcome, NextAction: next,
	}
	switch outcome {
	case attempt.OutcomeDelivered:
		r.StatusCode = 200
	case attempt.OutcomeGone:
		r.StatusCode = 410
	default:
		r.StatusCode, r.ErrorClass = 503, "http_5xx"
	}
	if next == attempt.NextRetry {
		r.NextDueAt = r.StartedAt.Add(30 * time.Second)
	}
	if next == attempt.NextDeadLetter {
		r.DLQ = &attempt.Position{Topic: "webhooks.dlq", Partition: 3, Offset: int64(40 + n)}
		r.DeadReason = "retries_exhausted"
	}
	return r
}

type deliveryRow struct {
	Status      string
	Attempts    int
	NextDue     *time.Time
	DeadReason  *string
	DLQOffset   *int64
	LastAttempt *time.Time
}

func getDelivery(t *testing.T, db *pgtest.DB, id string) deliveryRow {
	t.Helper()
	var d deliveryRow
	err := db.Store.Pool().QueryRow(context.Background(), `SELECT status, attempts, next_due_at, dead_reason, dlq_offset, last_attempt_at
		FROM webhooks.deliveries WHERE id = $1`, id).Scan(&d.Status, &d.Attempts, &d.NextDue, &d.DeadReason, &d.DLQOffset, &d.LastAttempt)
	require.NoError(t, err, "delivery %s", id)
	return d
}

func countAttempts(t *testing.T, db *pgtest.DB, deliveryID string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM webhooks.attempts WHERE delivery_id = $1`, deliveryID).Scan(&n))
	return n
}

func write(t *testing.T, db *pgtest.DB, now time.Time, recs ...*attempt.Record) store.WriteAttemptsResult {
	t.Helper()
	res, err := db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{
		Records: recs, Now: now, DisableAfter: 72 * time.Hour,
	})
	require.NoError(t, err)
	return res
}

func addEndpoint(t *testing.T, db *pgtest.DB, id string) {
	t.Helper()
	_, err := db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.endpoints (id, account, url, secrets)
		VALUES ($1, 'acct_1', 'https://example.com/hook', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`, id)
	require.NoError(t, err)
}

func TestWriteAttemptsIdempotentAndStateful(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	// The router's pending row exists for d1, not for d2.
	_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at)
		VALUES ('d1', 'evt-d1', 'ep1', 'acct_1', 'invoice.paid', $1)`, t0)
	require.NoError(t, err)

	batch := []*attempt.Record{
		rec("d1", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry),
		rec("d1", "ep1", 2, attempt.OutcomeRetry, attempt.NextRetry),
		rec("d2", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone),
	}
	batch = append(batch, batch[0]) // a duplicate inside the batch
	res := write(t, db, t0)
	require.Empty(t, res.Inserted)
	res = write(t, db, t0, batch...)
	require.Len(t, res.Inserted, 3)

	d1 := getDelivery(t, db, "d1")
	require.Equal(t, "retrying", d1.Status)
	require.Equal(t, 2, d1.Attempts)
	require.NotNil(t, d1.NextDue)
	require.True(t, d1.NextDue.Equal(t0.Add(2*time.Minute+30*time.Second)))
	d2 := getDelivery(t, db, "d2") // created by the writer: the router's insert had not landed
	require.Equal(t, "delivered", d2.Status)
	require.Equal(t, 1, d2.Attempts)

	// The same records again: nothing changes, nothing is counted.
	res = write(t, db, t0, batch...)
	require.Empty(t, res.Inserted)
	require.Equal(t, 2, countAttempts(t, db, "d1"))
	require.Equal(t, d1, getDelivery(t, db, "d1"))

	// The router's insert landing late does not reset the writer's row.
	tag, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at)
		VALUES ('d2', 'evt-d2', 'ep1', 'acct_1', 'invoice.paid', $1) ON CONFLICT DO NOTHING`, t0)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	require.Equal(t, "delivered", getDelivery(t, db, "d2").Status)

	// Dead-lettered at attempt 4, then attempt 3 arrives late: the row stays
	// dead with its DLQ position, the count stays 4.
	write(t, db, t0, rec("d1", "ep1", 4, attempt.OutcomeRetry, attempt.NextDeadLetter))
	write(t, db, t0, rec("d1", "ep1", 3, attempt.OutcomeRetry, attempt.NextRetry))
	d1 = getDelivery(t, db, "d1")
	require.Equal(t, "dead", d1.Status)
	require.Equal(t, 4, d1.Attempts)
	require.Equal(t, int64(44), *d1.DLQOffset)
	require.Equal(t, "retries_exhausted", *d1.DeadReason)
	require.Nil(t, d1.NextDue)
	require.Equal(t, 4, countAttempts(t, db, "d1"))

	// A late retry older than the one the row reflects changes nothing but
	// the count of attempts logged.
	write(t, db, t0, rec("d4", "ep1", 3, attempt.OutcomeRetry, attempt.NextRetry))
	write(t, db, t0, rec("d4", "ep1", 2, attempt.OutcomeRetry, attempt.NextRetry))
	d4 := getDelivery(t, db, "d4")
	require.Equal(t, 2, d4.Attempts)
	require.True(t, d4.NextDue.Equal(t0.Add(3*time.Minute+30*time.Second)), "next due %s", d4.NextDue)

	// A deferred record (backlog full, no request made) moves the due time
	// but does not count as an attempt.
	deferred := rec("d4", "ep1", 4, attempt.OutcomeDeferred, attempt.NextRetry)
	write(t, db, t0, deferred)
	d4 = getDelivery(t, db, "d4")
	require.Equal(t, 2, d4.Attempts)
	require.True(t, d4.NextDue.Equal(deferred.NextDueAt))

	// Out of order within a batch: the newest attempt wins.
	write(t, db, t0,
		rec("d3", "ep1", 2, attempt.OutcomeDelivered, attempt.NextDone),
		rec("d3", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry))
	require.Equal(t, "delivered", getDelivery(t, db, "d3").Status)

	// A delivered row never goes back to retrying for a newer non-replay
	// attempt (a dispatcher re-attempt after a crash)...
	write(t, db, t0, rec("d3", "ep1", 3, attempt.OutcomeRetry, attempt.NextRetry))
	d3 := getDelivery(t, db, "d3")
	require.Equal(t, "delivered", d3.Status)
	require.Equal(t, 3, d3.Attempts)
	// ... but a replay of a dead delivery moves it on.
	replay := rec("d1", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
	replay.AttemptID, replay.ReplayID, replay.StartedAt = "d1-replay-a1", "rpl_1", t0.Add(time.Hour)
	write(t, db, t0, replay)
	d1 = getDelivery(t, db, "d1")
	require.Equal(t, "delivered", d1.Status)
	require.Equal(t, 5, d1.Attempts, "attempts counts every attempt logged, a replay's too (issue 32: 4 + 1, not 4)")
	require.Equal(t, 5, countAttempts(t, db, "d1"), "as hookctl deliveries show lists them")
	require.Nil(t, d1.DLQOffset)
}

func TestWriteAttemptsStoresUntrustedText(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	r := rec("d1", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	r.ResponseExcerpt = "bad\x00bytes \xff\xfe here"
	r.Error = string(make([]byte, 100_000))
	res := write(t, db, t0, r)
	require.Len(t, res.Inserted, 1)
	var excerpt string
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(),
		`SELECT response_excerpt FROM webhooks.attempts WHERE attempt_id = $1`, r.AttemptID).Scan(&excerpt))
	require.Equal(t, "badbytes \uFFFD here", excerpt)
}

func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, ep := range []string{"ep1", "ep2", "ep3"} {
		addEndpoint(t, db, ep)
	}
	health := func(ep string) store.EndpointHealth {
		h, err := db.Store.GetEndpointHealth(ctx, ep)
		require.NoError(t, err)
		return h
	}

	// First failure sets failing_since; later failures keep it.
	write(t, db, t0, rec("d1", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry))
	require.True(t, health("ep1").FailingSince.Equal(t0.Add(time.Minute)))
	write(t, db, t0, rec("d1", "ep1", 2, attempt.OutcomeRetry, attempt.NextRetry))
	require.True(t, health("ep1").FailingSince.Equal(t0.Add(time.Minute)))
	// Any success clears it; a failure older than that success arriving late
	// does not set it again.
	write(t, db, t0, rec("d2", "ep1", 4, attempt.OutcomeDelivered, attempt.NextDone))
	require.True(t, health("ep1").FailingSince.IsZero())
	write(t, db, t0, rec("d3", "ep1", 3, attempt.OutcomeRetry, attempt.NextRetry))
	require.True(t, health("ep1").FailingSince.IsZero())
	// A circuit-open attempt says nothing about the endpoint.
	write(t, db, t0, rec("d4", "ep1", 5, attempt.OutcomeCircuitOpen, attempt.NextRetry))
	require.True(t, health("ep1").FailingSince.IsZero())

	// Failing for longer than disable-after disables it; the owner alert
	// names the endpoint by its description too.
	_, err := db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET description = 'billing webhooks' WHERE id = 'ep2'`)
	require.NoError(t, err)
	write(t, db, t0, rec("d5", "ep2", 1, attempt.OutcomeRetry, attempt.NextRetry))
	res := write(t, db, t0.Add(71*time.Hour), rec("d5", "ep2", 2, attempt.OutcomeRetry, attempt.NextRetry))
	require.Empty(t, res.Disabled)
	later := t0.Add(73 * time.Hour)
	res = write(t, db, later, rec("d5", "ep2", 3, attempt.OutcomeRetry, attempt.NextRetry))
	require.Len(t, res.Disabled, 1)
	require.Equal(t, "ep2", res.Disabled[0].ID)
	require.Equal(t, store.DisableReasonFailing, res.Disabled[0].Reason)
	require.Equal(t, "billing webhooks", res.Disabled[0].Description)
	h := health("ep2")
	require.Equal(t, "disabled", h.Status)
	require.Contains(t, h.DisabledReason, "failing continuously since 2026-03-10T12:01:00Z")
	require.True(t, h.DisabledAt.Equal(later))
	// Once, not at every attempt.
	res = write(t, db, later, rec("d5", "ep2", 4, attempt.OutcomeRetry, attempt.NextRetry))
	require.Empty(t, res.Disabled)
	owed, err := db.Store.PendingDisabledNotifications(ctx, 10)
	require.NoError(t, err)
	require.Len(t, owed, 1)
	require.Equal(t, "billing webhooks", owed[0].Description)
	require.NoError(t, db.Store.MarkDisabledNotified(ctx, "ep2", owed[0].DisabledAt))
	owed, err = db.Store.PendingDisabledNotifications(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, owed)

	// Re-enabling clears the state; old failures arriving late do not count.
	_, err = db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET status = 'active' WHERE id = 'ep2'`)
	require.NoError(t, err)
	h = health("ep2")
	require.Equal(t, "active", h.Status)
	require.True(t, h.FailingSince.IsZero())
	require.Empty(t, h.DisabledReason)
	res = write(t, db, later, rec("d5", "ep2", 5, attempt.OutcomeRetry, attempt.NextRetry))
	require.Empty(t, res.Disabled)
	require.True(t, health("ep2").FailingSince.IsZero())

	// 410 disables at once.
	res = write(t, db, t0, rec("d6", "ep3", 1, attempt.OutcomeGone, attempt.NextDeadLetter))
	require.Len(t, res.Disabled, 1)
	require.Equal(t, store.DisableReasonGone, res.Disabled[0].Reason)
	require.Equal(t, "disabled", health("ep3").Status)

	// The sweep disables an endpoint failing too long without new attempts.
	addEndpoint(t, db, "ep4")
	write(t, db, t0, rec("d7", "ep4", 1, attempt.OutcomeRetry, attempt.NextRetry))
	ds, err := db.Store.DisableFailingEndpoints(ctx, t0.Add(24*time.Hour), 72*time.Hour)
	require.NoError(t, err)
	require.Empty(t, ds)
	ds, err = db.Store.DisableFailingEndpoints(ctx, t0.Add(80*time.Hour), 72*time.Hour)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "ep4", ds[0].ID)
	n, err := db.Store.CountDisabledEndpoints(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
}

func TestOverdueDeliveries(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	now := time.Now()
	_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries
		(id, event_id, endpoint_id, account, event_type, event_created_at, status, next_due_at, created_at) VALUES
		('fresh',   'e1', 'ep1', 'a', 't', $1, 'pending',   NULL, $1),
		('stuck',   'e2', 'ep1', 'a', 't', $1, 'pending',   NULL, $1 - interval '1 hour'),
		('waiting', 'e3', 'ep1', 'a', 't', $1, 'retrying',  $1 + interval '1 hour', $1 - interval '2 hours'),
		('late',    'e4', 'ep1', 'a', 't', $1, 'retrying',  $1 - interval '1 hour', $1 - interval '3 hours'),
		('ancient', 'e5', 'ep1', 'a', 't', $1, 'retrying',  $1 + interval '1 hour', $1 - interval '100 hours'),
		('done',    'e6', 'ep1', 'a', 't', $1, 'delivered', NULL, $1 - interval '200 hours')`, now)
	require.NoError(t, err)
	rep, err := db.Store.OverdueDeliveries(ctx, store.OverdueParams{
		Now: now, PendingGrace: 15 * time.Minute, DueGrace: 15 * time.Minute, MaxAge: 64 * time.Hour, Limit: 2,
	})
	require.NoError(t, err)
	require.Equal(t, int64(3), rep.Count)
	require.Len(t, rep.Oldest, 2)
	require.Equal(t, "ancient", rep.Oldest[0].ID)
	require.Equal(t, "late", rep.Oldest[1].ID)

	b, err := db.Store.GetDeliveryBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Pending)
	require.Equal(t, int64(3), b.Retrying)
	require.WithinDuration(t, now.Add(-time.Hour), b.OldestPending, time.Millisecond)
}

// Issue 15: a busy endpoint's health row is rewritten about once a second,
// not once per batch: successes less than a second after the recorded one
// leave it alone. Yet a failure that started before a success the row did
// not record (answered out of order, logged after it) does not start
// failing_since, and a real outage still does.
func TestEndpointHealthToTheSecond(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")
	at := func(d string, off time.Duration, outcome attempt.Outcome, next attempt.NextAction) *attempt.Record {
		r := rec(d, "ep1", 1, outcome, next)
		r.StartedAt = t0.Add(off)
		return r
	}
	lastSuccess := func() time.Time {
		h, err := db.Store.GetEndpointHealth(ctx, "ep1")
		require.NoError(t, err)
		return h.LastSuccessAt
	}
	write(t, db, t0, at("s0", 0, attempt.OutcomeDelivered, attempt.NextDone))
	require.True(t, lastSuccess().Equal(t0))
	// Ten batches of successes within the second: the row stays.
	for i := 1; i <= 10; i++ {
		write(t, db, t0, at(fmt.Sprintf("s%d", i), time.Duration(i)*90*time.Millisecond, attempt.OutcomeDelivered, attempt.NextDone))
	}
	require.True(t, lastSuccess().Equal(t0), "rewritten within the second: %s", lastSuccess())
	// A failure that started at 0.5s, before the unrecorded success at
	// 0.9s, logged after it: no outage.
	write(t, db, t0, at("f1", 500*time.Millisecond, attempt.OutcomeRetry, attempt.NextRetry))
	h, err := db.Store.GetEndpointHealth(ctx, "ep1")
	require.NoError(t, err)
	require.True(t, h.FailingSince.IsZero(), "failing since %s", h.FailingSince)
	// A success more than a second on is recorded.
	write(t, db, t0, at("s11", 1500*time.Millisecond, attempt.OutcomeDelivered, attempt.NextDone))
	require.True(t, lastSuccess().Equal(t0.Add(1500*time.Millisecond)))
	// An outage: failures from 3s on start failing_since at the first.
	write(t, db, t0, at("f2", 3*time.Second, attempt.OutcomeRetry, attempt.NextRetry),
		at("f3", 4*time.Second, attempt.OutcomeRetry, attempt.NextRetry))
	h, err = db.Store.GetEndpointHealth(ctx, "ep1")
	require.NoError(t, err)
	require.True(t, h.FailingSince.Equal(t0.Add(3*time.Second)), "failing since %s", h.FailingSince)
	require.True(t, h.LastFailureAt.Equal(t0.Add(4*time.Second)))
	// A success ends it.
	write(t, db, t0, at("s12", 5*time.Second, attempt.OutcomeDelivered, attempt.NextDone))
	h, err = db.Store.GetEndpointHealth(ctx, "ep1")
	require.NoError(t, err)
	require.True(t, h.FailingSince.IsZero())
	require.True(t, h.LastSuccessAt.Equal(t0.Add(5*time.Second)))
}

// An attempt refused by the open breaker keeps the error that opened it in
// the delivery's last error (issue 32: a DNS failure was replaced by
// "circuit breaker open" in the portal's Last status).
func TestCircuitOpenKeepsTheRealLastError(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	lastError := func() string {
		var e string
		require.NoError(t, db.Store.Pool().QueryRow(context.Background(),
			`SELECT last_error FROM webhooks.deliveries WHERE id = 'd1'`).Scan(&e))
		return e
	}
	dns := rec("d1", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	dns.StatusCode, dns.ErrorClass, dns.Error = 0, "dns_error", "lookup hooks.example: no such host"
	write(t, db, t0, dns)
	require.Equal(t, "lookup hooks.example: no such host", lastError())
	for n := 2; n <= 3; n++ { // twice: the second refusal does not nest the text
		open := rec("d1", "ep1", n, attempt.OutcomeCircuitOpen, attempt.NextRetry)
		open.StatusCode, open.ErrorClass, open.Error = 0, "circuit_open", "circuit breaker open"
		write(t, db, t0, open)
		require.Equal(t, "circuit breaker open (last error: lookup hooks.example: no such host)", lastError())
	}
	write(t, db, t0, rec("d1", "ep1", 4, attempt.OutcomeRetry, attempt.NextRetry))
	require.Equal(t, "http_5xx", lastError(), "a real answer replaces it")
}

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookd/hookd/internal/attempt"
)

// ErrInvalidData wraps a write Postgres refused because of the data itself
// (SQLSTATE classes 22 and 23): retrying the same rows can never succeed.
// Any other write error is presumed transient (connection lost, server
// restarting, deadlock, lock timeout) and worth retrying.
var ErrInvalidData = errors.New("invalid data")

// maxTextLen caps the free-text fields of an attempt row (error, response
// excerpt) so that one huge answer cannot bloat the log.
const maxTextLen = 8 << 10

// WriteAttemptsParams is one batch for WriteAttempts.
type WriteAttemptsParams struct {
	// Records are the attempts to append, in any order; duplicates (same
	// attempt id and start time) are written once.
	Records []*attempt.Record
	// Now is the clock of the writer: it stamps disabled_at and decides
	// whether an endpoint has been failing for DisableAfter.
	Now time.Time
	// DisableAfter is how long an endpoint may fail continuously before it is
	// disabled. Zero never disables for duration (a 410 still disables).
	DisableAfter time.Duration
	// Pending are the pending rows of the same batch (the delivery records
	// read with Records), written in the same transaction as
	// WritePendingDeliveries would. A delivery whose fresh attempt is in
	// Records gets one row, inserted in its final state, instead of a
	// pending row updated at once. Their account mismatches are listed in
	// Mismatched with an empty AttemptID.
	Pending []PendingDelivery
}

// WriteAttemptsResult says what one batch changed.
type WriteAttemptsResult struct {
	// Inserted holds the attempt ids appended by this call. A record already
	// in the log (a redelivery) is absent: it changed nothing.
	Inserted map[string]bool
	// Disabled lists the endpoints this batch disabled.
	Disabled []DisabledEndpoint
	// Mismatched lists the attempts new to the log whose account is not
	// their endpoint's (or their delivery row's): they are logged under
	// their own account but move no other account's state (see
	// WriteAttempts).
	Mismatched []AccountMismatch
}

// AccountMismatch is a record whose account (its hookd-account) is not the
// account of the endpoint id it names (live or deleted), or not the
// account of the delivery row its delivery id names. Records of one account
// never change another account's rows.
type AccountMismatch struct {
	// AttemptID is empty for a pending delivery row.
	AttemptID  string
	DeliveryID string
	EndpointID string
	// Account is the record's account; Owner the account of the endpoint
	// or delivery row it collides with.
	Account string
	Owner   string
}

// Disable reasons, the machine-readable prefix of
// webhooks.endpoints.disabled_reason.
const (
	// DisableReasonGone: the endpoint answered 410 Gone.
	DisableReasonGone = "gone"
	// DisableReasonFailing: the endpoint failed continuously for longer
	// than the disable-after setting.
	DisableReasonFailing = "failing"
)

// DisabledEndpoint is an endpoint hookd disabled.
type DisabledEndpoint struct {
	ID      string
	Account string
	URL     string
	// Description is the endpoint's description ("" when none is set).
	Description string
	// Reason is DisableReasonGone, DisableReasonFailing, or, for an endpoint
	// disabled by another tool, the text of disabled_reason before its first ':'.
	Reason string
	// Detail is the whole disabled_reason text.
	Detail string
	// FailingSince is when the current run of failures started; zero if unknown.
	FailingSince time.Time
	DisabledAt   time.Time
}

// attemptInColumns are the columns of the per-session staging table that
// WriteAttempts COPYs a batch into.
var attemptInColumns = []string{
	"attempt_id", "delivery_id", "event_id", "event_type", "endpoint_id", "account", "event_created_at",
	"attempt", "tier", "started_at", "duration_ms", "status_code", "outcome", "error_class", "error",
	"response_excerpt", "next_action", "next_due_at", "dead_reason", "dlq_topic", "dlq_partition",
	"dlq_offset", "replay_id", "destination", "body_sha256",
}

// copyAttemptsIn stages a batch (attemptCopy's stream).
var copyAttemptsIn = `COPY hookd_attempts_in (` + strings.Join(attemptInColumns, ", ") + `) FROM STDIN (FORMAT binary)`

// The staging tables live as long as the connection and empty themselves
// at every commit, so a batch costs no catalog churn: hookd_attempts_in
// holds the batch's attempts, hookd_positions_in its delivery records'
// positions (records.go). One statement creates both, in one round trip.
const createStaging = `CREATE TEMP TABLE IF NOT EXISTS hookd_attempts_in (
	attempt_id text NOT NULL, delivery_id text NOT NULL, event_id text NOT NULL, event_type text NOT NULL,
	endpoint_id text NOT NULL, account text NOT NULL, event_created_at timestamptz NOT NULL,
	attempt integer NOT NULL, tier text NOT NULL, started_at timestamptz NOT NULL, duration_ms integer NOT NULL,
	status_code integer, outcome text NOT NULL, error_class text, error text, response_excerpt text,
	next_action text NOT NULL, next_due_at timestamptz, dead_reason text, dlq_topic text, dlq_partition integer,
	dlq_offset bigint, replay_id text, destination text, body_sha256 text, fresh boolean NOT NULL DEFAULT true, foreign_account text,
	inline boolean NOT NULL DEFAULT true, d_exists boolean NOT NULL DEFAULT false
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS hookd_positions_in (
	id text NOT NULL, account text NOT NULL, topic text NOT NULL, part integer NOT NULL, off bigint NOT NULL
) ON COMMIT DELETE ROWS`

// attemptRowColumns are the columns of the attempt log (webhooks.attempt_rows,
// and the view webhooks.attempts) that a staging row fills.
const attemptRowColumns = `attempt_id, delivery_id, event_id, endpoint_id, account, attempt, tier, started_at,
	duration_ms, status_code, outcome, error_class, error, response_excerpt, next_action, replay_id,
	destination, body_sha256`

// planEach makes Postgres plan a statement of a batch at every execution
// (an unnamed prepared statement) rather than keep the plan it made the
// first time on the connection: a plan made while a table was small (a
// young installation: 176 rows of webhooks.deliveries) hashed all 40,000
// rows it had grown to for each batch, 230 ms of a 280 ms classification,
// until autovacuum's next ANALYZE (issue 15). Planning costs well under a
// millisecond per statement, a few µs per delivery.
var planEach = pgx.QueryExecModeExec

// probe ends a correlated sub-select that must stay one index probe per
// staging row: OFFSET 0 keeps Postgres from turning it into a join or a
// hashed subplan, which read the whole table when its statistics are
// behind its size. LATERAL ... LIMIT 1 does the same for a join, and
// = ANY (ARRAY(...)) for an UPDATE's.
const probe = `OFFSET 0`

// classifyAttempts marks, in one pass over the staging table:
//   - fresh: the attempt is not in the log yet, neither in a row of its own
//     nor held by its delivery row. Only fresh attempts change delivery
//     state and endpoint health, so a redelivered record never counts twice.
//   - foreign_account (fresh ones): the account of the endpoint (the one
//     that created the endpoint id, live or deleted: ids are never reused)
//     or of the delivery row, when it is not the attempt's. Such an attempt
//     was made for one account at an endpoint of another (a forged or stale
//     record, or one from before ids were kept): it stays in the log under
//     its own account, never touches the endpoint's health, and moves only
//     its own account's delivery row, and only to dead (the dispatcher
//     dead-letters it as account_mismatch): never to delivered or retrying
//     on the strength of another account's receiver.
//   - inline: the first fresh attempt of a delivery, of its own account,
//     whose delivery row does not exist yet or holds no attempt: the
//     delivery row holds it (issue 15: one row per delivered webhook)
//     instead of a row of its own.
//   - d_exists: the delivery row exists (it is updated), or not yet (it is
//     inserted). One lookup of the row serves all four.
//
// The staging table's defaults are the common case (fresh, of its own
// account, held by a delivery row inserted now), so only the other rows
// are updated: rewriting every staged row cost a third of the
// classification and left the later statements twice the tuples to scan
// (issue 15).
//
// It returns the fresh attempts with a foreign account.
const classifyAttempts = `WITH c AS MATERIALIZED (
	SELECT i.attempt_id, i.started_at, i.delivery_id, i.attempt, i.account, i.event_id, i.endpoint_id,
		d.id IS NOT NULL AS d_exists,
		(d.a_id IS NULL OR d.a_id <> i.attempt_id OR d.a_started_at <> i.started_at)
			AND NOT EXISTS (SELECT 1 FROM webhooks.attempt_rows a WHERE a.attempt_id = i.attempt_id AND a.started_at = i.started_at
				` + probe + `) AS fresh,
		COALESCE(
			NULLIF((SELECT e.account FROM webhooks.endpoint_ids e WHERE e.id = i.endpoint_id), i.account),
			NULLIF(d.account, i.account)) AS other,
		d.id IS NOT NULL AND (d.a_id IS NOT NULL OR d.account <> i.account OR d.event_id <> i.event_id
			OR d.endpoint_id <> i.endpoint_id) AS row_blocks_inline
	FROM hookd_attempts_in i
	LEFT JOIN LATERAL (SELECT * FROM webhooks.deliveries d WHERE d.id = i.delivery_id LIMIT 1) d ON true
), r AS (
	SELECT c.*, fresh AND other IS NULL AND row_number() OVER (PARTITION BY delivery_id, fresh AND other IS NULL
		ORDER BY started_at, attempt, attempt_id) = 1 AS first
	FROM c
), u AS (
	UPDATE hookd_attempts_in i SET fresh = r.fresh, foreign_account = CASE WHEN r.fresh THEN r.other END,
		inline = r.first AND NOT r.row_blocks_inline, d_exists = r.d_exists
	FROM r WHERE r.attempt_id = i.attempt_id AND r.started_at = i.started_at
		AND (r.fresh AND r.other IS NULL AND r.first AND NOT r.row_blocks_inline AND NOT r.d_exists) IS NOT TRUE
	RETURNING i.attempt_id, i.delivery_id, i.endpoint_id, i.account, i.foreign_account
)
SELECT attempt_id, delivery_id, endpoint_id, account, foreign_account FROM u WHERE foreign_account IS NOT NULL`

// appendAttempts appends the fresh attempts that no delivery row holds.
// One another writer appended meanwhile (two writers of one record during
// a rebalance) is no longer fresh: it changes nothing twice.
const appendAttempts = `WITH ins AS (
	INSERT INTO webhooks.attempt_rows (` + attemptRowColumns + `)
	SELECT ` + attemptRowColumns + ` FROM hookd_attempts_in WHERE fresh AND NOT inline
	ON CONFLICT DO NOTHING
	RETURNING attempt_id, started_at
)
UPDATE hookd_attempts_in i SET fresh = false
WHERE i.fresh AND NOT i.inline AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.attempt_id = i.attempt_id AND ins.started_at = i.started_at)`

// appendUnheld appends the attempts meant to be held by an existing
// delivery row that it does not hold (the row changed under the writer):
// none is lost. A row the batch inserted holds its attempt: it was inserted
// so, or the batch failed.
const appendUnheld = `INSERT INTO webhooks.attempt_rows (` + attemptRowColumns + `)
SELECT ` + attemptRowColumns + ` FROM hookd_attempts_in i
WHERE i.inline AND i.d_exists AND NOT EXISTS (SELECT 1 FROM webhooks.deliveries d
	WHERE d.id = i.delivery_id AND d.a_id = i.attempt_id AND d.a_started_at = i.started_at ` + probe + `)
ON CONFLICT DO NOTHING`

// deliverySource is, per delivery of the batch whose row exists (or, with
// rowExists false, does not exist yet), its newest new attempt (by start
// time, then attempt number), how many of its new attempts were made
// (made_count: a count, not the highest attempt number, because a replay
// numbers its attempts from 1 again), and the fields (il_*) of the attempt
// its row is to hold, if holds. Window functions rather than joins: the staging table
// has no statistics, and the planner would nest loops over it. With
// oneEach (no delivery has two attempts in the batch: the common case,
// which WriteAttempts knows from the records) each attempt is its
// delivery's newest and only one, and the windows and sorts, a third of
// the statement's time, are left out.
func deliverySource(rowExists, oneEach bool) string {
	exists := "d_exists"
	if !rowExists {
		exists = "NOT d_exists"
	}
	// Another account's dead letter (foreign_account) moves only its own
	// account's row: with an attempt of the delivery's own account in the
	// batch, the row is that account's (created by it, or found: a row of
	// another account would have made the attempt foreign too), so the
	// dead letter is left out; taken as the newest, it would have given its
	// account, state and event to the row holding the other's attempt. With
	// oneEach a delivery has no other attempt in the batch.
	foreignDead := `next_action = 'dead_letter'`
	if !oneEach {
		foreignDead += ` AND NOT EXISTS (SELECT 1 FROM hookd_attempts_in o
		WHERE o.delivery_id = i.delivery_id AND o.fresh AND o.foreign_account IS NULL)`
	}
	f := `WITH f AS (
	SELECT * FROM hookd_attempts_in i WHERE fresh AND (foreign_account IS NULL OR (` + foreignDead + `)) AND ` + exists + `
),
`
	// deferred and skipped records carry the number of an attempt not made
	const made = `outcome NOT IN ('deferred', 'skipped')`
	latest := `w AS (
	SELECT f.*,
		count(*) FILTER (WHERE ` + made + `) OVER (PARTITION BY delivery_id) AS made_count,
		bool_or(inline) OVER (PARTITION BY delivery_id) AS holds,
		` + joinFields(func(f [2]string) string { return "first_value(" + f[1] + ") OVER held AS il_" + f[1] }) + `
	FROM f
	WINDOW held AS (PARTITION BY delivery_id ORDER BY inline DESC)
),
latest AS (
	SELECT DISTINCT ON (delivery_id) * FROM w ORDER BY delivery_id, started_at DESC, attempt DESC, attempt_id DESC
),
`
	if oneEach {
		latest = `latest AS (
	SELECT f.*, CASE WHEN ` + made + ` THEN 1 ELSE 0 END AS made_count, inline AS holds,
		` + joinFields(func(f [2]string) string { return f[1] + " AS il_" + f[1] }) + `
	FROM f
),
`
	}
	return f + latest + `src AS (
	SELECT l.*,
		CASE l.next_action WHEN 'done' THEN 'delivered' WHEN 'dead_letter' THEN 'dead' WHEN 'retry' THEN 'retrying' END AS new_status,
		COALESCE(NULLIF(l.error, ''), NULLIF(l.error_class, '')) AS last_error,
		l.started_at + make_interval(secs => l.duration_ms / 1000.0) AS finished_at
	FROM latest l
)
`
}

// Create the rows not there yet, with the state of their newest attempt,
// holding their first. A plain INSERT, not INSERT ... ON CONFLICT: the
// classification just looked each row up, and speculative insertion (a
// probe of the primary key, a confirmation WAL record per row) cost a fifth
// of the batch's Postgres CPU (issue 15). A row another writer inserted
// meanwhile (two writers of one partition during a rebalance) fails the
// batch with a unique violation, which WriteAttempts reports as worth
// retrying: the next try finds the row and updates it.
func insertDeliveries(oneEach bool) string {
	return deliverySource(false, oneEach) + `
INSERT INTO webhooks.deliveries AS d (id, event_id, endpoint_id, account, event_type, status, attempts,
	last_status_code, last_error, next_due_at, dead_reason, dlq_topic, dlq_partition, dlq_offset,
	event_created_at, delivered_at, last_attempt_at, ` + inlineColumns + `, record_topic, record_partition, record_offset)
SELECT s.delivery_id, s.event_id, s.endpoint_id, s.account, s.event_type, COALESCE(s.new_status, 'pending'), s.made_count,
	s.status_code, s.last_error,
	CASE WHEN s.new_status = 'retrying' THEN s.next_due_at END,
	CASE WHEN s.new_status = 'dead' THEN s.dead_reason END,
	CASE WHEN s.new_status = 'dead' THEN s.dlq_topic END,
	CASE WHEN s.new_status = 'dead' THEN s.dlq_partition END,
	CASE WHEN s.new_status = 'dead' THEN s.dlq_offset END,
	s.event_created_at,
	CASE WHEN s.new_status = 'delivered' THEN s.finished_at END,
	CASE WHEN s.new_status IS NOT NULL THEN s.started_at END,
	` + inlineValues + `, pos.topic, pos.part, pos.off
FROM src s LEFT JOIN (` + stagedPositions("true") + `) pos ON pos.id = s.delivery_id AND pos.account = s.account
ORDER BY s.delivery_id`
}

// Move existing rows to the state of their newest attempt when it is newer
// than the one they reflect, adding their new attempts to its count in the
// same update (fresh attempts only, so a batch written twice counts once). A terminal row (delivered, dead) only moves on
// for a replay's attempt, or from dead to delivered (the endpoint did get
// it); never back to retrying because a stale or duplicated attempt arrived.
func applyDeliveryState(oneEach bool) string {
	return deliverySource(true, oneEach) + `
UPDATE webhooks.deliveries d SET
	status = CASE WHEN ` + movesState + ` THEN s.new_status ELSE d.status END,
	last_status_code = CASE WHEN ` + movesState + ` THEN s.status_code ELSE d.last_status_code END,
	last_error = CASE WHEN ` + movesState + ` THEN ` + keepRealError + ` ELSE d.last_error END,
	next_due_at = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'retrying' THEN s.next_due_at END ELSE d.next_due_at END,
	dead_reason = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'dead' THEN s.dead_reason END ELSE d.dead_reason END,
	dlq_topic = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'dead' THEN s.dlq_topic END ELSE d.dlq_topic END,
	dlq_partition = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'dead' THEN s.dlq_partition END ELSE d.dlq_partition END,
	dlq_offset = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'dead' THEN s.dlq_offset END ELSE d.dlq_offset END,
	delivered_at = CASE WHEN ` + movesState + ` THEN CASE WHEN s.new_status = 'delivered' THEN s.finished_at END ELSE d.delivered_at END,
	last_attempt_at = CASE WHEN ` + movesState + ` THEN s.started_at ELSE d.last_attempt_at END,
	attempts = d.attempts + s.made_count,
	` + holdInline + `,
	updated_at = now()
FROM src s
WHERE d.id = s.delivery_id AND d.id = ANY (ARRAY(SELECT delivery_id FROM src)) AND d.account = s.account
	AND (` + movesState + ` OR s.made_count > 0 OR (s.holds AND d.a_id IS NULL))`
}

// The statements of both kinds of batch, rendered once.
var (
	insertDeliveriesSQL   = [2]string{insertDeliveries(false), insertDeliveries(true)}
	applyDeliveryStateSQL = [2]string{applyDeliveryState(false), applyDeliveryState(true)}
)

// oneAttemptEach says whether no delivery has two records among recs
// (deliverySource's oneEach); as an index into the rendered statements.
// Delivery ids are compared as staged (cleanAttemptText): two ids that
// differ only by what cleaning drops are one delivery in Postgres, and
// rendered as one each they would insert its row twice.
func oneAttemptEach(recs []*attempt.Record) int {
	seen := make(map[string]struct{}, len(recs))
	for _, r := range recs {
		if r == nil {
			continue
		}
		id := cleanAttemptText(r.DeliveryID)
		if _, dup := seen[id]; dup {
			return 0
		}
		seen[id] = struct{}{}
	}
	return 1
}

// movesState says whether a delivery row (d) moves to the state of the
// newest attempt of the batch (s): when it is newer than the one the row
// reflects. A terminal row (delivered, dead) only moves on for a replay's
// attempt, or from dead to delivered (the endpoint did get it); never back
// to retrying because a stale or duplicated attempt arrived.
const movesState = `(s.new_status IS NOT NULL
	AND (d.last_attempt_at IS NULL OR s.started_at > d.last_attempt_at)
	AND (d.status NOT IN ('delivered', 'dead')
		OR s.replay_id IS NOT NULL
		OR (d.status = 'dead' AND s.new_status = 'delivered')))`

// keepRealError is a delivery's last error after attempt s: an attempt the
// open breaker refused says nothing new about the receiver, so the error
// that opened it (a DNS failure, a 503) stays visible beside it instead of
// being replaced by "circuit breaker open" (issue 32).
const keepRealError = `CASE
		WHEN s.outcome <> 'circuit_open' OR d.last_error IS NULL OR d.last_error = '' THEN s.last_error
		WHEN d.last_error LIKE 'circuit breaker open%' THEN d.last_error
		ELSE 'circuit breaker open (last error: ' || d.last_error || ')' END`

// inlineFields pairs the columns of a delivery row that hold an attempt
// with the attempt's.
var inlineFields = [][2]string{
	{"a_id", "attempt_id"}, {"a_attempt", "attempt"}, {"a_tier", "tier"}, {"a_started_at", "started_at"},
	{"a_duration_ms", "duration_ms"}, {"a_status_code", "status_code"}, {"a_outcome", "outcome"},
	{"a_error_class", "error_class"}, {"a_error", "error"}, {"a_response_excerpt", "response_excerpt"},
	{"a_next_action", "next_action"}, {"a_replay_id", "replay_id"}, {"a_destination", "destination"},
	{"a_body_sha256", "body_sha256"},
}

var (
	inlineColumns = joinFields(func(f [2]string) string { return f[0] })
	inlineValues  = joinFields(func(f [2]string) string { return "CASE WHEN s.holds THEN s.il_" + f[1] + " END" })
	// holdInline sets a row's held attempt if it holds none yet.
	holdInline = joinFields(func(f [2]string) string {
		return f[0] + " = CASE WHEN d.a_id IS NULL AND s.holds THEN s.il_" + f[1] + " ELSE d." + f[0] + " END"
	})
)

func joinFields(render func([2]string) string) string {
	parts := make([]string, len(inlineFields))
	for i, f := range inlineFields {
		parts[i] = render(f)
	}
	return strings.Join(parts, ", ")
}

// Failure and success, for endpoint health. Attempts that made no request
// (circuit open, deferred, skipped) say nothing about the endpoint.
const (
	sqlSuccess  = `('delivered')`
	sqlFailures = `('retry', 'gone', 'permanent', 'refused')`
)

// healthResolution is how precisely endpoint_health records the newest
// success and failure: a batch moves them on only by more than this, so a
// busy endpoint's health row is rewritten about once a second, not once
// per batch (issue 15: writes per delivery). The recorded success is thus
// at most this much older than the newest one logged, and a failure counts
// (failing_since, a 410 disabling) only when it started more than this
// after the recorded success: a failure that started before a success
// (answered out of order) is never mistaken for the start of an outage.
// An outage's failing_since can start up to this much late.
const healthResolution = `interval '1 second'`

// Record the newest success and failure of every endpoint of the batch,
// to healthResolution. The endpoints whose health row is recent enough are
// left out before the upsert: ON CONFLICT locks the row it meets even when
// its WHERE then updates nothing (a lock WAL record each), and most
// endpoints of a batch are such (issue 15). The upsert's own WHERE still
// decides, against a row another writer moved meanwhile. Only endpoints
// whose failing_since the batch cannot move (successes only, at an
// endpoint not failing) are left out: for the others, the row lock is what
// makes the batch wait for another writer moving the same endpoint's
// health (a success ending its failing), so that updateFailingSince and
// disableFromBatch decide on what it committed, not on the endpoint as it
// was before (which could set failing_since back and disable an endpoint
// that has just answered 200).
const upsertEndpointHealth = `INSERT INTO webhooks.endpoint_health AS h (endpoint_id, last_success_at, last_failure_at)
SELECT n.endpoint_id, n.last_success_at, n.last_failure_at
FROM (
	SELECT endpoint_id,
		max(started_at) FILTER (WHERE outcome IN ` + sqlSuccess + `) AS last_success_at,
		max(started_at) FILTER (WHERE outcome IN ` + sqlFailures + `) AS last_failure_at
	FROM hookd_attempts_in
	WHERE fresh AND foreign_account IS NULL AND (outcome IN ` + sqlSuccess + ` OR outcome IN ` + sqlFailures + `)
	GROUP BY endpoint_id
) n
LEFT JOIN LATERAL (SELECT * FROM webhooks.endpoint_health o WHERE o.endpoint_id = n.endpoint_id ` + probe + `) o ON true
WHERE o.endpoint_id IS NULL
	OR n.last_failure_at IS NOT NULL
	OR n.endpoint_id IN (SELECT id FROM webhooks.endpoints WHERE failing_since IS NOT NULL)
	OR n.last_success_at > COALESCE(o.last_success_at, '-infinity'::timestamptz) + ` + healthResolution + `
ORDER BY n.endpoint_id
ON CONFLICT (endpoint_id) DO UPDATE SET
	last_success_at = GREATEST(h.last_success_at, EXCLUDED.last_success_at),
	last_failure_at = GREATEST(h.last_failure_at, EXCLUDED.last_failure_at)
WHERE EXCLUDED.last_success_at > COALESCE(h.last_success_at, '-infinity'::timestamptz) + ` + healthResolution + `
	OR EXCLUDED.last_failure_at > COALESCE(h.last_failure_at, '-infinity'::timestamptz) + ` + healthResolution

// healthBase is, per endpoint, the instant after which a failure counts:
// its recorded success (plus healthResolution) or its re-enabling,
// whichever is later.
const healthBase = `COALESCE(GREATEST(h.last_success_at + ` + healthResolution + `, h.reset_at), '-infinity'::timestamptz)`

// healthRelevant are the fresh attempts of the batch, of their endpoint's
// account, that can move failing_since or disable their endpoint: the
// failures, and every attempt at an endpoint already failing (a success
// ends its failing). A batch of successes at healthy endpoints has none,
// and costs no lookup of its endpoints (endpoints_failing_idx lists the
// failing ones).
const healthRelevant = `SELECT * FROM hookd_attempts_in WHERE fresh AND foreign_account IS NULL
	AND (outcome IN ` + sqlFailures + ` OR endpoint_id IN (SELECT id FROM webhooks.endpoints WHERE failing_since IS NOT NULL))`

// failing_since is the first failure after the newest success (or reset):
// cleared by a success newer than it, set by a failure newer than the last
// success. It changes only on transitions, so the endpoint row (and its
// NOTIFY) is not rewritten for every attempt.
const updateFailingSince = `UPDATE webhooks.endpoints e SET failing_since = n.fs, updated_at = now()
FROM (
	SELECT e2.id, LEAST(
		CASE WHEN e2.failing_since > ` + healthBase + ` THEN e2.failing_since END,
		min(i.started_at) FILTER (WHERE i.outcome IN ` + sqlFailures + ` AND i.started_at > ` + healthBase + `)
	) AS fs
	FROM webhooks.endpoints e2
	JOIN (` + healthRelevant + `) i ON i.endpoint_id = e2.id
	LEFT JOIN webhooks.endpoint_health h ON h.endpoint_id = e2.id
	GROUP BY e2.id, e2.failing_since, h.last_success_at, h.reset_at
	ORDER BY e2.id
) n
WHERE e.id = n.id AND e.failing_since IS DISTINCT FROM n.fs`

// disabledReasonFailing renders the disabled_reason of an endpoint failing
// for too long; $3 is the disable-after setting as text.
const disabledReasonFailing = `'` + DisableReasonFailing + `: failing continuously since ' ||
	to_char(e.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ', longer than ' || $3::text`

const disabledReasonGone = `'` + DisableReasonGone + `: the endpoint answered 410 Gone'`

const disabledReturning = `RETURNING e.id, e.account, e.url, e.description, e.disabled_reason, e.failing_since, e.disabled_at`

// Disable the active endpoints of the batch that answered 410 after their
// last success, or whose failures started before the cutoff ($2).
const disableFromBatch = `UPDATE webhooks.endpoints e SET
	status = 'disabled', disabled_at = $1, disabled_notified_at = NULL, updated_at = now(),
	disabled_reason = CASE WHEN g.gone THEN ` + disabledReasonGone + ` ELSE ` + disabledReasonFailing + ` END
FROM (
	SELECT e2.id, bool_or(i.outcome = 'gone' AND i.started_at > ` + healthBase + `) AS gone
	FROM webhooks.endpoints e2
	JOIN (` + healthRelevant + `) i ON i.endpoint_id = e2.id
	LEFT JOIN webhooks.endpoint_health h ON h.endpoint_id = e2.id
	WHERE e2.status = 'active'
	GROUP BY e2.id
	ORDER BY e2.id
) g
WHERE e.id = g.id AND e.status = 'active' AND (g.gone OR ($4 AND e.failing_since <= $2))
` + disabledReturning

// WriteAttempts appends a batch of attempt records to the attempt log (the
// view webhooks.attempts), staged with COPY, and in the same transaction
// writes the batch's pending rows and moves each delivery's state row and
// each endpoint's health on and stages the batch's deltas of the hourly
// chart rollup (one row: FoldAttemptHours adds them up later, out of this
// transaction), then disables the endpoints that answered 410 or have been
// failing for longer than DisableAfter. It is idempotent: records
// already in the log change nothing. A record whose account is not its
// endpoint's or its delivery row's is appended under its own account but
// changes no other account's state; it is listed in Mismatched. An error
// wrapping ErrInvalidData means the batch can never be written as is; any
// other error is worth retrying.
//
// Rows written: a delivery's row holds its first logged attempt, so a
// delivery whose pending record and first attempt share the batch costs one
// insert; one whose pending row is already there, one update. Later
// attempts get rows of their own in webhooks.attempt_rows.
func (s *Store) WriteAttempts(ctx context.Context, p WriteAttemptsParams) (WriteAttemptsResult, error) {
	res := WriteAttemptsResult{Inserted: map[string]bool{}}
	staged, nStaged := attemptCopy(p.Records)
	if nStaged == 0 {
		ms, err := s.WritePendingDeliveries(ctx, p.Pending)
		res.Mismatched = ms
		return res, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, wrapWriteError("beginning attempt batch", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if _, err := tx.Exec(ctx, createStaging); err != nil {
		return res, wrapWriteError("creating attempt staging table", err)
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(staged), copyAttemptsIn); err != nil {
		return res, wrapWriteError("copying attempts", err)
	}
	positions, err := stagePositions(ctx, tx, p.Pending, p.Records)
	if err != nil {
		return res, err
	}
	// The pending rows with no attempt of their account in the batch come
	// first, as a lone pending batch would, so that the account checks see
	// them.
	if res.Mismatched, err = writePending(ctx, tx, pendingWithoutAttempts(p.Pending, p.Records), pendingAll); err != nil {
		return res, err
	}
	am, err := collectMismatches(tx.Query(ctx, classifyAttempts, planEach))
	if err != nil {
		return res, wrapWriteError("classifying attempts", err)
	}
	if _, err := tx.Exec(ctx, appendAttempts, planEach); err != nil {
		return res, wrapWriteError("appending attempts", err)
	}
	ids, err := txStrings(ctx, tx, `SELECT attempt_id FROM hookd_attempts_in WHERE fresh`)
	if err != nil {
		return res, wrapWriteError("appending attempts", err)
	}
	for _, id := range ids {
		res.Inserted[id] = true
	}
	if len(ids) > 0 {
		res.Mismatched = append(res.Mismatched, am...)
		oneEach := oneAttemptEach(p.Records)
		if s.windowsAlways {
			oneEach = 0
		}
		// Existing rows move first, in one update each (state, attempt
		// count, held attempt); then the rows not there yet are inserted in
		// their final state, holding their first attempt.
		for _, step := range []struct{ what, sql string }{
			{"updating delivery state", applyDeliveryStateSQL[oneEach]},
			{"creating delivery rows", insertDeliveriesSQL[oneEach]},
			{"appending attempts", appendUnheld},
			{"recording endpoint health", upsertEndpointHealth},
			{"updating failing_since", updateFailingSince},
			{"staging the hourly rollup's deltas", stageAttemptHours},
		} {
			// The rows inserted here hold their record's position from
			// the start (stagedPositions): no second write.
			if _, err := tx.Exec(ctx, step.sql, planEach); err != nil {
				if isUniqueViolation(err) && step.sql == insertDeliveriesSQL[oneEach] {
					return res, &writeStepError{msg: "creating delivery rows: another writer created one meanwhile (" + oneLine(err) + "); retrying finds it", err: err}
				}
				return res, wrapWriteError(step.what, err)
			}
		}
		cutoff := p.Now.Add(-p.DisableAfter)
		res.Disabled, err = collectDisabled(tx.Query(ctx, disableFromBatch, planEach, p.Now, cutoff, p.DisableAfter.String(), p.DisableAfter > 0))
		if err != nil {
			return res, wrapWriteError("disabling endpoints", err)
		}
	}
	// The others last, and only those whose attempt was kept out as
	// another account's: the rest have their row now, in its final state.
	pm, err := writePending(ctx, tx, pendingOfForeignAttempts(p.Pending, am), pendingWithAttempt)
	if err != nil {
		return res, err
	}
	res.Mismatched = append(res.Mismatched, pm...)
	if err := recordPositions(ctx, tx, positions); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return WriteAttemptsResult{Inserted: map[string]bool{}}, wrapWriteError("committing attempt batch", err)
	}
	return res, nil
}

// pendingWithoutAttempts are the pending rows with no attempt of their
// account among recs (what pendingWithoutAttempt selects in SQL, without
// comparing every pending row with every staged attempt).
func pendingWithoutAttempts(pending []PendingDelivery, recs []*attempt.Record) []PendingDelivery {
	if len(pending) == 0 {
		return nil
	}
	type key struct{ delivery, account string }
	attempted := make(map[key]bool, len(recs))
	for _, r := range recs {
		if r != nil {
			attempted[key{r.DeliveryID, r.Account}] = true
		}
	}
	var out []PendingDelivery
	for _, p := range pending {
		if !attempted[key{p.ID, p.Account}] {
			out = append(out, p)
		}
	}
	return out
}

// pendingOfForeignAttempts are the pending rows whose delivery has an
// attempt in the batch kept out as another account's (am).
func pendingOfForeignAttempts(pending []PendingDelivery, am []AccountMismatch) []PendingDelivery {
	if len(am) == 0 {
		return nil
	}
	foreign := make(map[string]bool, len(am))
	for _, m := range am {
		foreign[m.DeliveryID] = true
	}
	var out []PendingDelivery
	for _, p := range pending {
		if foreign[p.ID] {
			out = append(out, p)
		}
	}
	return out
}

func collectMismatches(rows pgx.Rows, err error) ([]AccountMismatch, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AccountMismatch, error) {
		var m AccountMismatch
		err := row.Scan(&m.AttemptID, &m.DeliveryID, &m.EndpointID, &m.Account, &m.Owner)
		return m, err
	})
}

// attemptCopy renders records as the binary COPY stream of staging rows
// (attemptInColumns), once per (attempt id, start time): the same attempt
// twice in a batch (a record read twice) is staged once. Text is made
// storable: Postgres refuses NUL bytes and invalid UTF-8, which an
// endpoint's response may well contain. It returns the stream and the
// number of rows.
func attemptCopy(recs []*attempt.Record) ([]byte, int) {
	type key struct {
		id      string
		started time.Time
	}
	seen := make(map[key]bool, len(recs))
	c := newCopyBinary(len(recs) * 400)
	n := 0
	for _, r := range recs {
		if r == nil {
			continue
		}
		k := key{r.AttemptID, r.StartedAt.UTC()}
		if seen[k] {
			continue
		}
		seen[k] = true
		n++
		stageAttempt(c, r)
	}
	return c.end(), n
}

// stageAttempt appends r's staging row to c, its fields in the order of
// attemptInColumns.
func stageAttempt(c *copyBinary, r *attempt.Record) {
	created := r.EventCreated
	if created.IsZero() {
		created = r.StartedAt
	}
	c.tuple(len(attemptInColumns))
	for _, s := range []string{r.AttemptID, r.DeliveryID, r.EventID, r.EventType, r.EndpointID, r.Account} {
		c.text(cleanAttemptText(s))
	}
	c.timestamptz(created)
	c.int4(int32(min(r.Attempt, math.MaxInt32)))
	c.text(cleanAttemptText(r.Tier))
	c.timestamptz(r.StartedAt)
	c.int4(int32(min(max(r.Duration.Milliseconds(), 0), math.MaxInt32)))
	if r.StatusCode == 0 {
		c.null()
	} else {
		c.int4(int32(min(max(r.StatusCode, math.MinInt32), math.MaxInt32)))
	}
	c.text(cleanAttemptText(string(r.Outcome)))
	for _, s := range []string{r.ErrorClass, r.Error, r.ResponseExcerpt} {
		c.nullText(cleanAttemptText(s))
	}
	c.text(cleanAttemptText(string(r.NextAction)))
	if r.NextDueAt.IsZero() {
		c.null()
	} else {
		c.timestamptz(r.NextDueAt)
	}
	c.nullText(cleanAttemptText(r.DeadReason))
	if r.DLQ == nil {
		c.null()
		c.null()
		c.null()
	} else {
		c.text(cleanAttemptText(r.DLQ.Topic))
		c.int4(r.DLQ.Partition)
		c.int8(r.DLQ.Offset)
	}
	c.nullText(cleanAttemptText(r.ReplayID))
	c.nullText(cleanAttemptText(r.Destination))
	if validDigest(r.BodySHA256) {
		c.text(r.BodySHA256)
	} else {
		c.null()
	}
}

func cleanAttemptText(s string) string {
	if len(s) > maxTextLen {
		s = s[:maxTextLen]
	}
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s // nearly always: ValidString checks 8 ASCII bytes at a time, ToValidUTF8 decodes every rune
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}

// validDigest says whether s is 64 lowercase hex characters (the
// column's check): a malformed digest from the attempts topic is staged as
// NULL, not allowed to fail the batch.
func validDigest(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

func txStrings(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// writeError wraps err for a write step, marking the errors that retrying
// cannot fix with ErrInvalidData.
func wrapWriteError(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")) {
		return fmt.Errorf("%s: %w: %s", what, ErrInvalidData, oneLine(err))
	}
	return &writeStepError{msg: what + ": " + oneLine(err), err: err}
}

// isUniqueViolation says whether err is Postgres refusing a duplicate key.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// writeStepError keeps the short message of oneLine while letting callers still
// test the cause (context.Canceled, ...) with errors.Is.
type writeStepError struct {
	msg string
	err error
}

func (e *writeStepError) Error() string { return e.msg }
func (e *writeStepError) Unwrap() error { return e.err }

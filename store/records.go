package store

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/attempt"
)

// copyPositionsIn stages a batch's record positions (stagePositions's
// stream) in hookd_positions_in (createStaging). Binary COPY rather than
// arrays as statement arguments: the arrays cost the writer their text
// encoding and Postgres their parsing, twice a batch.
const copyPositionsIn = `COPY hookd_positions_in (id, account, topic, part, off) FROM STDIN (FORMAT binary)`

// stagePositions stages the known positions of ds, and of the delivery
// records the first attempts among recs were made for, and returns how
// many there are. An attempt's source is the record its pending row would
// stage (the router's, a test event's), so a row the attempt creates holds
// its position from the start even when the writer reads the attempt
// before the delivery record: otherwise that record, read later, moved the
// row again for its position alone, and that update, with no free space
// on the row's page, wrote every index of webhooks.deliveries anew (0.1
// updates per delivery at hookbench's saturation, 2026-12-07). A replay's
// attempt or a retry's never stages its source: that record is a copy.
func stagePositions(ctx context.Context, tx pgx.Tx, ds []PendingDelivery, recs []*attempt.Record) (int, error) {
	c := newCopyBinary((len(ds) + len(recs)) * 96)
	n := 0
	stage := func(id, account, topic string, part int32, off int64) {
		n++
		c.tuple(5)
		c.text(id)
		c.text(account)
		c.text(topic)
		c.int4(part)
		c.int8(off)
	}
	type key struct{ id, account string }
	var staged map[key]bool
	if len(recs) > 0 {
		staged = make(map[key]bool, len(ds))
	}
	for _, d := range ds {
		if d.Topic != "" {
			stage(d.ID, d.Account, d.Topic, d.Partition, d.Offset)
			if staged != nil {
				staged[key{d.ID, d.Account}] = true
			}
		}
	}
	for _, r := range recs {
		// The usual batch holds the record with its first attempt: the
		// record's position is staged already, the same one.
		if firstRead(r) && !staged[key{r.DeliveryID, r.Account}] {
			stage(cleanAttemptText(r.DeliveryID), cleanAttemptText(r.Account), cleanAttemptText(r.Source.Topic),
				r.Source.Partition, r.Source.Offset)
		}
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(c.end()), copyPositionsIn); err != nil {
		return 0, wrapWriteError(fmt.Sprintf("staging the positions of %d delivery records", n), err)
	}
	return n, nil
}

// firstRead says whether r was made for the first record of its delivery
// read (its first attempt, not a replay's), with that record's position.
func firstRead(r *attempt.Record) bool {
	return r != nil && r.Attempt == 1 && r.ReplayID == "" && r.Source != nil && r.Source.Topic != ""
}

// stagedPositions is, as a subquery, the staged record positions that
// match where (p is the staged row): one per delivery and account, the
// lowest offset (a batch may hold a record and its replay).
func stagedPositions(where string) string {
	return `SELECT DISTINCT ON (id, account) id, account, topic, part, off FROM hookd_positions_in p
	WHERE ` + where + ` ORDER BY id, account, off`
}

// recordPositionsSQL writes the staged positions into the rows that have
// none yet: rows created before their record was read (or before hookd
// kept positions). The first record read (the router's, a test event's)
// keeps its place; a replayed copy never moves it. Only the row of the
// record's own account is touched. The rows the batch inserted from its
// attempts (insertDeliveries: fresh, their own account's, no row before)
// hold their position already and are left out before the join: probing
// each of them again cost Postgres more than any other step of a batch
// (BenchmarkWriterPostgresWrites, 2026-12-06). = ANY (ARRAY(...)) keeps
// the rest to index probes: joined, the planner scanned the whole table.
var recordPositionsSQL = `WITH t AS MATERIALIZED (
	` + stagedPositions(`NOT EXISTS (SELECT 1 FROM hookd_attempts_in a WHERE a.delivery_id = p.id AND a.account = p.account
		AND a.fresh AND NOT a.d_exists AND a.foreign_account IS NULL)`) + `
)
UPDATE webhooks.deliveries d SET record_topic = t.topic, record_partition = t.part, record_offset = t.off
FROM t
WHERE d.id = ANY (ARRAY(SELECT id FROM t)) AND d.id = t.id AND d.account = t.account AND d.record_topic IS NULL`

// recordPositions runs recordPositionsSQL when n positions are staged.
func recordPositions(ctx context.Context, tx pgx.Tx, n int) error {
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, recordPositionsSQL, planEach); err != nil {
		return wrapWriteError(fmt.Sprintf("recording the positions of %d delivery records", n), err)
	}
	return nil
}

// ReplaySend is one delivery a replay (or resend) produced.
type ReplaySend struct {
	Account, DeliveryID, EndpointID string
}

// RecordReplaySends records that replay id of scope (its audit row's
// account, "" for an operator's) sent ss, after the broker acknowledged
// them: the replay's own record of what it sent (LastReplaySends, the
// portal's replay list). Recording the same send again changes only its
// time.
func (s *Store) RecordReplaySends(ctx context.Context, scope, id string, ss []ReplaySend) error {
	if len(ss) == 0 {
		return nil
	}
	accounts, deliveries, endpoints := make([]string, len(ss)), make([]string, len(ss)), make([]string, len(ss))
	for i, x := range ss {
		accounts[i], deliveries[i], endpoints[i] = x.Account, x.DeliveryID, x.EndpointID
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.replay_sends (account, delivery_id, endpoint_id, replay_scope, replay_id)
		SELECT DISTINCT ON (a, d) a, d, e, $4, $5 FROM unnest($1::text[], $2::text[], $3::text[]) AS t(a, d, e)
		ON CONFLICT (account, delivery_id, replay_scope, replay_id) DO UPDATE SET sent_at = now()`,
		accounts, deliveries, endpoints, scope, id)
	if err != nil {
		return fmt.Errorf("recording what replay %s sent: %s", id, oneLine(err))
	}
	return nil
}

// LastReplaySends returns, of keys, when a replay or resend last sent each
// delivery (absent: never).
func (s *Store) LastReplaySends(ctx context.Context, keys []DeliveryKey) (map[DeliveryKey]time.Time, error) {
	out := map[DeliveryKey]time.Time{}
	if len(keys) == 0 {
		return out, nil
	}
	accounts, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		accounts[i], ids[i] = k.Account, k.ID
	}
	rows, err := s.pool.Query(ctx, `SELECT r.account, r.delivery_id, max(r.sent_at) FROM webhooks.replay_sends r
		JOIN unnest($1::text[], $2::text[]) AS k(account, id) ON r.account = k.account AND r.delivery_id = k.id
		GROUP BY r.account, r.delivery_id`, accounts, ids)
	if err != nil {
		return nil, fmt.Errorf("looking up replayed deliveries: %s", oneLine(err))
	}
	var (
		k  DeliveryKey
		at time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&k.Account, &k.ID, &at}, func() error {
		out[k] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("looking up replayed deliveries: %s", oneLine(err))
	}
	return out, nil
}

// OperatorReplay is an operator's replay as one account sees it in the
// portal: only what concerns that account.
type OperatorReplay struct {
	Replay
	// Sent counts the account's deliveries it sent (of the endpoint, for
	// an endpoint's view).
	Sent int64
	// ForAccount: the operator named the account in the replay's filter,
	// so its reason is about this account and is shown.
	ForAccount bool
}

// ListOperatorReplays returns the operators' replays (hookctl, the admin
// token) that sent deliveries of account (of endpointID, when set), or
// whose filter names the account, newest first.
func (s *Store) ListOperatorReplays(ctx context.Context, account, endpointID string, limit int) ([]OperatorReplay, error) {
	rows, err := s.pool.Query(ctx, `WITH sent AS (
			SELECT replay_id, count(*) AS n FROM webhooks.replay_sends
			WHERE account = $1 AND replay_scope = '' AND ($2 = '' OR endpoint_id = $2) GROUP BY replay_id)
		SELECT r.id, r.kind, r.actor, r.reason, r.account, r.filter, r.dry_run, r.matched, r.replayed, r.skipped,
			r.status, r.error, r.progress, r.created_at, r.updated_at, r.finished_at, coalesce(sent.n, 0), coalesce(r.filter->>'account' = $1, false)
		FROM webhooks.replays r LEFT JOIN sent ON sent.replay_id = r.id
		WHERE r.account IS NULL AND NOT r.dry_run AND (sent.n IS NOT NULL
			OR (r.filter->>'account' = $1 AND ($2 = '' OR r.filter->>'endpoint' = $2)))
		ORDER BY r.created_at DESC, r.id LIMIT $3`, account, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing operator replays: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperatorReplay, error) {
		var (
			o         OperatorReplay
			acct, msg *string
		)
		err := row.Scan(&o.ID, &o.Kind, &o.Actor, &o.Reason, &acct, &o.Filter, &o.DryRun, &o.Matched, &o.Replayed,
			&o.Skipped, &o.Status, &msg, &o.Progress, &o.CreatedAt, &o.UpdatedAt, &o.FinishedAt, &o.Sent, &o.ForAccount)
		o.Account, o.Error = deref(acct), deref(msg)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing operator replays: %s", oneLine(err))
	}
	return out, nil
}

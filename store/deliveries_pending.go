package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingDelivery is the first row of one delivery, written by the router
// at fan-out.
type PendingDelivery struct {
	ID           string
	EventID      string
	EndpointID   string
	Account      string
	EventType    string
	EventCreated time.Time
	// Topic, Partition and Offset locate the delivery record this row
	// comes from (Delivery.RecordTopic); Topic "" when unknown.
	Topic     string
	Partition int32
	Offset    int64
}

// InsertPendingDeliveries is WritePendingDeliveries for callers with no
// use for the account mismatches (tests, tools).
func (s *Store) InsertPendingDeliveries(ctx context.Context, ds []PendingDelivery) error {
	_, err := s.WritePendingDeliveries(ctx, ds)
	return err
}

// WritePendingDeliveries writes one 'pending' row per delivery in one
// transaction: one statement for the rows, one for the positions of the
// rows that existed without one. A row that exists already is otherwise
// left alone: the attempt-log writer may have written a later status
// first, and a re-read of the same events must not reset it.
//
// It returns the rows whose account is not the account of their endpoint id
// (live or deleted) or of the existing row with their delivery id. The
// latter are not written: a delivery row stays its account's. The former
// are written as their own account's rows, which never list under that
// endpoint (ListDeliveries scopes by the endpoint's account).
func (s *Store) WritePendingDeliveries(ctx context.Context, ds []PendingDelivery) ([]AccountMismatch, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, wrapWriteError("beginning pending batch", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, createStaging); err != nil {
		return nil, wrapWriteError("creating staging tables", err)
	}
	positions, err := stagePositions(ctx, tx, ds, nil)
	if err != nil {
		return nil, err
	}
	ms, err := writePending(ctx, tx, ds, pendingAll)
	if err != nil {
		return ms, err
	}
	if err := recordPositions(ctx, tx, positions); err != nil {
		return ms, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, wrapWriteError("committing pending batch", err)
	}
	return ms, nil
}

// rowsQuerier is a pool or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Which pending rows of a batch writePending writes. Inside WriteAttempts,
// the rows with no attempt of their account in the batch are written
// first, as a lone pending batch would (pendingAll, chosen in Go); of the
// others, only those whose attempt was kept out as another account's are
// written, last (pendingWithAttempt): the rest have their row already,
// created by the attempt in its final state.
const (
	pendingAll         = `true`
	pendingWithAttempt = `EXISTS (SELECT 1 FROM hookd_attempts_in a WHERE a.delivery_id = t.id AND a.account = t.account)`
)

// writePendingSQL inserts the rows selected by the filter %s; the final
// SELECT sees the rows as they were before this INSERT.
const writePendingSQL = `WITH input AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
			$7::text[], $8::int[], $9::bigint[])
			AS t(id, event_id, endpoint_id, account, event_type, event_created_at, record_topic, record_partition, record_offset)
		WHERE %s
	), ins AS (
		INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at,
			record_topic, record_partition, record_offset)
		SELECT id, event_id, endpoint_id, account, event_type, event_created_at, NULLIF(record_topic, ''),
			CASE WHEN record_topic <> '' THEN record_partition END, CASE WHEN record_topic <> '' THEN record_offset END
		FROM input
		ON CONFLICT (id) DO NOTHING
	), checked AS (
		SELECT i.id, i.endpoint_id, i.account, COALESCE(
			NULLIF((SELECT e.account FROM webhooks.endpoint_ids e WHERE e.id = i.endpoint_id), i.account),
			NULLIF((SELECT d.account FROM webhooks.deliveries d WHERE d.id = i.id), i.account)) AS owner
		FROM input i
	)
	SELECT DISTINCT id, endpoint_id, account, owner FROM checked WHERE owner IS NOT NULL ORDER BY id`

func writePending(ctx context.Context, q rowsQuerier, ds []PendingDelivery, filter string) ([]AccountMismatch, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ds))
	events := make([]string, len(ds))
	endpoints := make([]string, len(ds))
	accounts := make([]string, len(ds))
	types := make([]string, len(ds))
	created := make([]time.Time, len(ds))
	topics, parts, offsets := make([]string, len(ds)), make([]int32, len(ds)), make([]int64, len(ds))
	for i, d := range ds {
		ids[i], events[i], endpoints[i], accounts[i], types[i], created[i] =
			d.ID, d.EventID, d.EndpointID, d.Account, d.EventType, d.EventCreated
		topics[i], parts[i], offsets[i] = d.Topic, d.Partition, d.Offset
	}
	rows, err := q.Query(ctx, fmt.Sprintf(writePendingSQL, filter), planEach, ids, events, endpoints, accounts, types, created,
		topics, parts, offsets)
	if err != nil {
		return nil, wrapWriteError(fmt.Sprintf("inserting %d pending deliveries", len(ds)), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AccountMismatch, error) {
		var m AccountMismatch
		err := row.Scan(&m.DeliveryID, &m.EndpointID, &m.Account, &m.Owner)
		return m, err
	})
	if err != nil {
		return nil, wrapWriteError(fmt.Sprintf("inserting %d pending deliveries", len(ds)), err)
	}
	return out, nil
}

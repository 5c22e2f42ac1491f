package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// OverdueParams says when a non-terminal delivery is overdue.
type OverdueParams struct {
	// Now is the reconciler's clock.
	Now time.Time
	// PendingGrace: a pending delivery (never attempted) older than this is
	// overdue.
	PendingGrace time.Duration
	// DueGrace: a retrying delivery whose next attempt is this late is overdue.
	DueGrace time.Duration
	// MaxAge: a non-terminal delivery older than this (the whole retry
	// schedule plus a margin) is overdue whatever its next due time says.
	MaxAge time.Duration
	// Limit caps the examples returned in OverdueReport.Oldest.
	Limit int
}

// OverdueDelivery is one delivery that is late.
type OverdueDelivery struct {
	ID         string
	EndpointID string
	Status     string
	Attempts   int
	CreatedAt  time.Time
	// NextDueAt is zero for a pending delivery.
	NextDueAt time.Time
}

// OverdueReport is the result of OverdueDeliveries.
type OverdueReport struct {
	// Count is how many deliveries are overdue.
	Count int64
	// Oldest are up to Limit of them, oldest first.
	Oldest []OverdueDelivery
}

const overdueWhere = `FROM webhooks.deliveries
	WHERE (status = 'pending' AND created_at < $1)
	   OR (status = 'retrying' AND next_due_at < $2)
	   OR (status IN ('pending', 'retrying') AND created_at < $3)`

// OverdueDeliveries finds the deliveries that have been non-terminal longer
// than their schedule allows: pending for longer than PendingGrace, retrying
// past their next due time by more than DueGrace, or open for longer than
// MaxAge.
func (s *Store) OverdueDeliveries(ctx context.Context, p OverdueParams) (OverdueReport, error) {
	var rep OverdueReport
	args := []any{p.Now.Add(-p.PendingGrace), p.Now.Add(-p.DueGrace), p.Now.Add(-p.MaxAge)}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) `+overdueWhere, args...).Scan(&rep.Count); err != nil {
		return rep, wrapWriteError("counting overdue deliveries", err)
	}
	if rep.Count == 0 || p.Limit <= 0 {
		return rep, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, endpoint_id, status, attempts, created_at, next_due_at `+
		overdueWhere+` ORDER BY created_at, id LIMIT $4`, append(args, p.Limit)...)
	if err != nil {
		return rep, wrapWriteError("listing overdue deliveries", err)
	}
	rep.Oldest, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OverdueDelivery, error) {
		var d OverdueDelivery
		var due *time.Time
		err := row.Scan(&d.ID, &d.EndpointID, &d.Status, &d.Attempts, &d.CreatedAt, &due)
		d.NextDueAt = timeOrZero(due)
		return d, err
	})
	if err != nil {
		return rep, wrapWriteError("listing overdue deliveries", err)
	}
	return rep, nil
}

// DeliveryBacklog is a summary of the non-terminal deliveries.
type DeliveryBacklog struct {
	Pending  int64
	Retrying int64
	// OldestPending is the creation time of the oldest pending delivery;
	// zero when there is none.
	OldestPending time.Time
}

// GetDeliveryBacklog counts the non-terminal deliveries and finds the
// oldest pending one.
func (s *Store) GetDeliveryBacklog(ctx context.Context) (DeliveryBacklog, error) {
	var b DeliveryBacklog
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE status = 'pending'),
			count(*) FILTER (WHERE status = 'retrying'),
			(SELECT min(created_at) FROM webhooks.deliveries WHERE status = 'pending')
		FROM webhooks.deliveries WHERE status IN ('pending', 'retrying')`).Scan(&b.Pending, &b.Retrying, &oldest)
	if err != nil {
		return b, wrapWriteError("summarising delivery backlog", err)
	}
	b.OldestPending = timeOrZero(oldest)
	return b, nil
}

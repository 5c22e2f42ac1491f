package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClearHeldParams tunes ClearExpiredHeldAttempts.
type ClearHeldParams struct {
	// Batch is the most delivery rows one statement clears, so that no
	// statement holds many row locks or writes one huge transaction.
	// Defaults to 5000.
	Batch int
}

// ClearExpiredHeldAttempts erases the attempts delivery rows hold that
// started before the attempt log's horizon (webhooks.attempt_horizon, moved
// on by MaintainAttemptPartitions): it sets every a_* column of those rows
// to NULL, so that an attempt's data (error, response excerpt, destination)
// is gone from the table with its day, as the attempt-retention promises,
// not only hidden by the webhooks.attempts view. It returns how many rows
// it cleared, including when ctx ends or a statement fails half-way.
//
// It needs no index of its own: it walks the endpoints that have held
// attempts on deliveries_a_endpoint_started_idx (two index descents per
// endpoint, so a pass with nothing due costs that and no more), and clears
// each endpoint's due rows in statements of at most Batch rows, each its
// own transaction. Rows another transaction has locked are left for the
// next pass.
func (s *Store) ClearExpiredHeldAttempts(ctx context.Context, p ClearHeldParams) (int64, error) {
	if p.Batch == 0 {
		p.Batch = 5000
	}
	if p.Batch < 0 {
		return 0, fmt.Errorf("held attempt clearing batch: must be positive, got %d", p.Batch)
	}
	var horizon *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT CASE WHEN isfinite(horizon) THEN horizon END FROM webhooks.attempt_horizon`).Scan(&horizon); err != nil {
		return 0, fmt.Errorf("reading the attempt log horizon: %w", err)
	}
	if horizon == nil {
		return 0, nil // no day has been dropped yet
	}
	rows, err := s.pool.Query(ctx, endpointsHoldingExpired, *horizon)
	if err != nil {
		return 0, fmt.Errorf("finding expired held attempts: %w", err)
	}
	endpoints, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("finding expired held attempts: %w", err)
	}
	var cleared int64
	for _, ep := range endpoints {
		n, err := s.clearEndpointHeld(ctx, ep, *horizon, p.Batch)
		cleared += n
		if err != nil {
			return cleared, err
		}
	}
	return cleared, nil
}

// clearEndpointHeld clears one endpoint's held attempts that started
// before horizon, batch rows per statement, until none is left.
func (s *Store) clearEndpointHeld(ctx context.Context, endpoint string, horizon time.Time, batch int) (int64, error) {
	var cleared int64
	for {
		if err := ctx.Err(); err != nil {
			return cleared, fmt.Errorf("clearing held attempts: %w", err)
		}
		tag, err := s.pool.Exec(ctx, clearHeld, endpoint, horizon, batch)
		if err != nil {
			return cleared, fmt.Errorf("clearing held attempts of endpoint %s: %w", endpoint, err)
		}
		cleared += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return cleared, nil
		}
	}
}

// endpointsHoldingExpired lists the endpoints with a held attempt that
// started before $1: a loose index scan of
// deliveries_a_endpoint_started_idx (endpoint_id, a_started_at) WHERE a_id
// IS NOT NULL, one descent to the next endpoint and one to its oldest held
// attempt. The index holds only the rows that hold an attempt, which after
// a pass are those of the kept window.
const endpointsHoldingExpired = `WITH RECURSIVE ep(id) AS (
	(SELECT endpoint_id FROM webhooks.deliveries WHERE a_id IS NOT NULL ORDER BY endpoint_id LIMIT 1)
	UNION ALL
	SELECT (SELECT d.endpoint_id FROM webhooks.deliveries d
		WHERE d.a_id IS NOT NULL AND d.endpoint_id > ep.id ORDER BY d.endpoint_id LIMIT 1)
	FROM ep WHERE ep.id IS NOT NULL
)
SELECT ep.id FROM ep
WHERE ep.id IS NOT NULL AND (SELECT min(d.a_started_at) FROM webhooks.deliveries d
	WHERE d.endpoint_id = ep.id AND d.a_id IS NOT NULL) < $1`

// clearHeld clears the a_* columns (all of them: the check
// deliveries_inline_attempt_whole) of at most $3 rows of endpoint $1 whose
// held attempt started before $2, skipping rows a writer has locked.
var clearHeld = `UPDATE webhooks.deliveries d SET ` + joinFields(func(f [2]string) string { return f[0] + " = NULL" }) + `
FROM (SELECT id FROM webhooks.deliveries
	WHERE endpoint_id = $1 AND a_id IS NOT NULL AND a_started_at < $2
	ORDER BY a_started_at LIMIT $3 FOR UPDATE SKIP LOCKED) due
WHERE d.id = due.id`

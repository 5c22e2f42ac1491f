package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailingEndpoint is an endpoint in a failing episode, as the owner alerts
// (hookd.endpoint.failing) describe it.
type FailingEndpoint struct {
	ID, Account, Description string
	// FailingSince starts the episode; it is the episode's key.
	FailingSince time.Time
	// LastStatus (0 when there was no HTTP answer) and LastErrorClass are
	// those of the newest failed attempt of the episode.
	LastStatus     int
	LastErrorClass string
}

// FailingToWarn lists, at most limit, the active endpoints failing since
// at or before cutoff whose current episode has not been warned about yet.
func (s *Store) FailingToWarn(ctx context.Context, cutoff time.Time, limit int) ([]FailingEndpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT e.id, e.account, e.description, e.failing_since,
			COALESCE(l.status_code, 0), COALESCE(l.error_class, '')
		FROM webhooks.endpoints e
		LEFT JOIN webhooks.endpoint_health h ON h.endpoint_id = e.id
		LEFT JOIN LATERAL (SELECT a.status_code, a.error_class FROM webhooks.attempts a
			WHERE a.endpoint_id = e.id AND a.started_at >= e.failing_since AND a.outcome <> 'delivered'
			ORDER BY a.started_at DESC LIMIT 1) l ON true
		WHERE e.status = 'active' AND e.failing_since <= $1
			AND h.warned_failing_since IS DISTINCT FROM e.failing_since
		ORDER BY e.failing_since, e.id LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, wrapWriteError("listing failing endpoints to warn", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailingEndpoint, error) {
		var f FailingEndpoint
		var status int32
		err := row.Scan(&f.ID, &f.Account, &f.Description, &f.FailingSince, &status, &f.LastErrorClass)
		f.LastStatus = int(status)
		return f, err
	})
	if err != nil {
		return nil, wrapWriteError("listing failing endpoints to warn", err)
	}
	return out, nil
}

// MarkFailingWarned records that the hookd.endpoint.failing event of the
// episode starting at failingSince was produced.
func (s *Store) MarkFailingWarned(ctx context.Context, endpointID string, failingSince time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.endpoint_health AS h (endpoint_id, warned_failing_since) VALUES ($1, $2)
		ON CONFLICT (endpoint_id) DO UPDATE SET warned_failing_since = $2`, endpointID, failingSince)
	if err != nil {
		return wrapWriteError("marking endpoint failing warned", err)
	}
	return nil
}

// RecoveredEndpoint is an endpoint whose warned-about failing episode ended
// with a success (hookd.endpoint.recovered).
type RecoveredEndpoint struct {
	ID, Account, Description string
	// FailingSince is the key of the episode that ended.
	FailingSince  time.Time
	LastSuccessAt time.Time
}

// RecoveredToAnnounce lists, at most limit, the endpoints whose warned
// episode is over (their failing_since changed or was cleared) and which
// succeeded since it began.
func (s *Store) RecoveredToAnnounce(ctx context.Context, limit int) ([]RecoveredEndpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT e.id, e.account, e.description, h.warned_failing_since, h.last_success_at
		FROM webhooks.endpoint_health h JOIN webhooks.endpoints e ON e.id = h.endpoint_id
		WHERE h.warned_failing_since IS NOT NULL
			AND (e.failing_since IS NULL OR e.failing_since <> h.warned_failing_since)
			AND h.last_success_at >= h.warned_failing_since
		ORDER BY h.last_success_at, e.id LIMIT $1`, limit)
	if err != nil {
		return nil, wrapWriteError("listing recovered endpoints", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RecoveredEndpoint])
	if err != nil {
		return nil, wrapWriteError("listing recovered endpoints", err)
	}
	return out, nil
}

// MarkRecoveredAnnounced records that the hookd.endpoint.recovered event of
// the episode failingSince was produced: the episode is closed.
func (s *Store) MarkRecoveredAnnounced(ctx context.Context, endpointID string, failingSince time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE webhooks.endpoint_health SET warned_failing_since = NULL
		WHERE endpoint_id = $1 AND warned_failing_since = $2`, endpointID, failingSince)
	if err != nil {
		return wrapWriteError("marking endpoint recovered", err)
	}
	return nil
}

// DeadLetterAlert is one endpoint's dead letters of one hour
// (hookd.delivery.dead_lettered).
type DeadLetterAlert struct {
	EndpointID, Account string
	// Hour starts the hour (UTC) the dead letters happened in.
	Hour  time.Time
	Count int
	// SampleEventIDs are the first few event ids of the hour.
	SampleEventIDs []string
}

// MaxDeadLetterSamples caps DeadLetterAlert.SampleEventIDs.
const MaxDeadLetterSamples = 5

// maxAlertSweepHours bounds how far back one sweep looks (after a long
// outage of the role, older hours are not announced).
const maxAlertSweepHours = 48

// Aggregate the dead letters of [from, to) by endpoint and hour, leaving out
// hookd's own operational events (an alert about failed alerts would feed
// itself) and deliveries that are no longer dead (replayed or resent and
// delivered since): the alert is about what still needs the owner.
const aggregateDeadLetters = `INSERT INTO webhooks.dead_letter_alerts (endpoint_id, hour, account, count, sample_event_ids)
SELECT a.endpoint_id, date_trunc('hour', a.started_at, 'UTC'), d.account, count(DISTINCT a.delivery_id),
	(array_agg(a.event_id ORDER BY a.started_at, a.event_id))[1:5] -- MaxDeadLetterSamples
FROM webhooks.attempts a JOIN webhooks.deliveries d ON d.id = a.delivery_id
WHERE a.next_action = 'dead_letter' AND a.started_at >= $1 AND a.started_at < $2 AND d.event_type NOT LIKE 'hookd.%'
	AND d.status = 'dead'
GROUP BY 1, 2, 3
ON CONFLICT DO NOTHING`

// SweepDeadLetterHours aggregates the dead letters of every whole hour that
// ended at or before upTo and was not swept yet (the first sweep takes the
// last whole hour only; at most 48 hours at once), into owed
// DeadLetterAlerts. Each hour is aggregated once, so its count is fixed and
// re-running a sweep changes nothing. It returns the rows added.
func (s *Store) SweepDeadLetterHours(ctx context.Context, upTo time.Time) (int64, error) {
	to := upTo.UTC().Truncate(time.Hour)
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhooks.dead_letter_alert_sweeps (swept_hour) VALUES ($1)
			ON CONFLICT DO NOTHING`, to.Add(-time.Hour)); err != nil {
			return err
		}
		var swept time.Time
		if err := tx.QueryRow(ctx, `SELECT swept_hour FROM webhooks.dead_letter_alert_sweeps FOR UPDATE`).Scan(&swept); err != nil {
			return err
		}
		from := swept
		if oldest := to.Add(-maxAlertSweepHours * time.Hour); from.Before(oldest) {
			from = oldest
		}
		if !from.Before(to) {
			return nil
		}
		tag, err := tx.Exec(ctx, aggregateDeadLetters, from, to)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `UPDATE webhooks.dead_letter_alert_sweeps SET swept_hour = $1`, to)
		return err
	})
	if err != nil {
		return 0, wrapWriteError("aggregating dead letters by hour", err)
	}
	return n, nil
}

// OwedDeadLetterAlerts lists, oldest first and at most limit, the
// aggregated hours whose event has not been produced yet.
func (s *Store) OwedDeadLetterAlerts(ctx context.Context, limit int) ([]DeadLetterAlert, error) {
	rows, err := s.pool.Query(ctx, `SELECT endpoint_id, account, hour, count, sample_event_ids
		FROM webhooks.dead_letter_alerts WHERE notified_at IS NULL ORDER BY hour, endpoint_id LIMIT $1`, limit)
	if err != nil {
		return nil, wrapWriteError("listing owed dead-letter alerts", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetterAlert])
	if err != nil {
		return nil, wrapWriteError("listing owed dead-letter alerts", err)
	}
	return out, nil
}

// MarkDeadLetterAlertNotified records that the event of endpointID's hour
// was produced.
func (s *Store) MarkDeadLetterAlertNotified(ctx context.Context, endpointID string, hour time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE webhooks.dead_letter_alerts SET notified_at = now()
		WHERE endpoint_id = $1 AND hour = $2 AND notified_at IS NULL`, endpointID, hour)
	if err != nil {
		return wrapWriteError("marking dead-letter alert notified", err)
	}
	return nil
}

// DeadLetterCounts are an endpoint's dead letters over the last hour and
// the last 24 hours (the portal's banners).
type DeadLetterCounts struct {
	LastHour, LastDay int64
}

// CountDeadLetters counts the deliveries of the endpoints ids of account
// dead-lettered in the hour and the day before now that are still dead: the
// banner counts what its link (the delivery log's dead deliveries) lists, not
// dead letters replayed and delivered since.
func (s *Store) CountDeadLetters(ctx context.Context, account string, ids []string, now time.Time) (map[string]DeadLetterCounts, error) {
	if account == "" {
		return nil, errors.New("counting dead letters: the account is required")
	}
	rows, err := s.pool.Query(ctx, `SELECT a.endpoint_id,
			count(DISTINCT a.delivery_id) FILTER (WHERE a.started_at >= $3), count(DISTINCT a.delivery_id)
		FROM webhooks.attempts a JOIN webhooks.deliveries d ON d.id = a.delivery_id
		WHERE a.endpoint_id = ANY($2::text[]) AND a.next_action = 'dead_letter' AND a.started_at >= $4
			AND (a.account = $1 OR a.account IS NULL) AND d.status = 'dead'
		GROUP BY a.endpoint_id`, account, ids, now.Add(-time.Hour), now.Add(-24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("counting dead letters: %s", oneLine(err))
	}
	out := map[string]DeadLetterCounts{}
	for rows.Next() {
		var id string
		var c DeadLetterCounts
		if err := rows.Scan(&id, &c.LastHour, &c.LastDay); err != nil {
			rows.Close()
			return nil, fmt.Errorf("counting dead letters: %s", oneLine(err))
		}
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting dead letters: %s", oneLine(err))
	}
	return out, nil
}

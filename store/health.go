package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Disable the active endpoints failing since before the cutoff ($2), for the
// endpoints that receive no attempt any more (the batch path covers the rest).
const disableFailing = `UPDATE webhooks.endpoints e SET
	status = 'disabled', disabled_at = $1, disabled_notified_at = NULL, updated_at = now(),
	disabled_reason = ` + disabledReasonFailing + `
WHERE e.id IN (
	SELECT id FROM webhooks.endpoints
	WHERE status = 'active' AND failing_since <= $2
	ORDER BY id
	FOR UPDATE
) AND e.status = 'active' AND e.failing_since <= $2
` + disabledReturning

// DisableFailingEndpoints disables every active endpoint that has been
// failing continuously since before now - after, and returns them. It is
// the periodic sweep behind WriteAttempts, for endpoints that stopped
// receiving attempts while failing.
func (s *Store) DisableFailingEndpoints(ctx context.Context, now time.Time, after time.Duration) ([]DisabledEndpoint, error) {
	disabled, err := collectDisabled(s.pool.Query(ctx, disableFailing, now, now.Add(-after), after.String()))
	if err != nil {
		return nil, wrapWriteError("disabling failing endpoints", err)
	}
	return disabled, nil
}

// PendingDisabledNotifications lists, oldest first and at most limit, the
// disabled endpoints whose endpoint.disabled event has not been produced yet.
func (s *Store) PendingDisabledNotifications(ctx context.Context, limit int) ([]DisabledEndpoint, error) {
	disabled, err := collectDisabled(s.pool.Query(ctx, `SELECT e.id, e.account, e.url, e.description, e.disabled_reason, e.failing_since, e.disabled_at
		FROM webhooks.endpoints e
		WHERE e.status = 'disabled' AND e.disabled_notified_at IS NULL AND e.disabled_at IS NOT NULL
		ORDER BY e.disabled_at, e.id LIMIT $1`, limit))
	if err != nil {
		return nil, wrapWriteError("listing unnotified disabled endpoints", err)
	}
	return disabled, nil
}

// MarkDisabledNotified records that the endpoint.disabled event of the
// disablement at disabledAt was produced. A re-enabled or re-disabled
// endpoint is left alone: its new state owes its own event.
func (s *Store) MarkDisabledNotified(ctx context.Context, endpointID string, disabledAt time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE webhooks.endpoints SET disabled_notified_at = now()
		WHERE id = $1 AND status = 'disabled' AND disabled_at = $2 AND disabled_notified_at IS NULL`, endpointID, disabledAt)
	if err != nil {
		return wrapWriteError("marking endpoint.disabled notified", err)
	}
	return nil
}

// CountDisabledEndpoints counts the endpoints in status disabled.
func (s *Store) CountDisabledEndpoints(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhooks.endpoints WHERE status = 'disabled'`).Scan(&n); err != nil {
		return 0, wrapWriteError("counting disabled endpoints", err)
	}
	return n, nil
}

// EndpointHealth is the health state of one endpoint.
type EndpointHealth struct {
	Status string
	// FailingSince is zero when the endpoint is not failing.
	FailingSince   time.Time
	DisabledReason string
	DisabledAt     time.Time
	// LastSuccessAt and LastFailureAt are zero when none was seen.
	LastSuccessAt time.Time
	LastFailureAt time.Time
}

// GetEndpointHealth reads the health state of an endpoint, ErrNotFound if
// there is no such endpoint.
func (s *Store) GetEndpointHealth(ctx context.Context, endpointID string) (EndpointHealth, error) {
	var h EndpointHealth
	var failing, disabledAt, success, failure *time.Time
	var reason *string
	err := s.pool.QueryRow(ctx, `SELECT e.status, e.failing_since, e.disabled_reason, e.disabled_at,
			h.last_success_at, h.last_failure_at
		FROM webhooks.endpoints e LEFT JOIN webhooks.endpoint_health h ON h.endpoint_id = e.id
		WHERE e.id = $1`, endpointID).Scan(&h.Status, &failing, &reason, &disabledAt, &success, &failure)
	if err != nil {
		return h, translate(err)
	}
	h.FailingSince, h.DisabledAt, h.LastSuccessAt, h.LastFailureAt = timeOrZero(failing), timeOrZero(disabledAt), timeOrZero(success), timeOrZero(failure)
	if reason != nil {
		h.DisabledReason = *reason
	}
	return h, nil
}

func collectDisabled(rows pgx.Rows, err error) ([]DisabledEndpoint, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (DisabledEndpoint, error) {
		var d DisabledEndpoint
		var reason *string
		var failing *time.Time
		if err := row.Scan(&d.ID, &d.Account, &d.URL, &d.Description, &reason, &failing, &d.DisabledAt); err != nil {
			return d, err
		}
		if reason != nil {
			d.Detail = *reason
			d.Reason, _, _ = strings.Cut(*reason, ":")
		}
		d.FailingSince = timeOrZero(failing)
		return d, nil
	})
}

func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

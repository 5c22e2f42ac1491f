package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookd/hookd/internal/endpoint"
)

// ErrAlreadyExists is returned when creating a row whose id is taken.
var ErrAlreadyExists = errors.New("already exists")

// EndpointChannel is the NOTIFY channel the endpoints trigger signals on,
// with the changed endpoint's id as payload.
const EndpointChannel = "hookd_endpoints"

var _ endpoint.Source = (*Store)(nil)

const endpointColumns = `id, account, url, description, secrets, event_types, status, max_in_flight, timeout_ms,
	rate_per_sec, failing_since, disabled_reason, disabled_at, created_at, updated_at, headers, filter, client_cert, client_key, send_traceparent,
	ordering`

// scanEndpoint reads one endpoint row and opens its signing secrets.
func (s *Store) scanEndpoint(row pgx.Row) (endpoint.Endpoint, error) {
	var (
		e                       endpoint.Endpoint
		status                  string
		maxInFlight, timeoutMS  *int32
		rate                    *float64
		failingSince, disableAt *time.Time
		disabledReason          *string
		clientCert, clientKey   *string
		ordering                string
	)
	err := row.Scan(&e.ID, &e.Account, &e.URL, &e.Description, &e.Secrets, &e.EventTypes, &status,
		&maxInFlight, &timeoutMS, &rate, &failingSince, &disabledReason, &disableAt, &e.CreatedAt, &e.UpdatedAt, &e.Headers, &e.Filter,
		&clientCert, &clientKey, &e.SendTraceparent,
		&ordering)
	if err != nil {
		return e, translate(err)
	}
	e.Status = endpoint.Status(status)
	if ordering != string(endpoint.OrderingNone) {
		e.Ordering = endpoint.Ordering(ordering) // the default stays "", as before the column
	}
	if maxInFlight != nil {
		e.MaxInFlight = int(*maxInFlight)
	}
	if timeoutMS != nil {
		e.Timeout = time.Duration(*timeoutMS) * time.Millisecond
	}
	if rate != nil {
		e.RatePerSec = *rate
	}
	if failingSince != nil {
		e.FailingSince = *failingSince
	}
	if disableAt != nil {
		e.DisabledAt = *disableAt
	}
	if disabledReason != nil {
		e.DisabledReason = *disabledReason
	}
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if len(e.Headers) == 0 {
		e.Headers = nil // one "none" for callers and the dispatcher's comparisons
	}
	if e.Secrets, err = s.openSecrets(e.ID, e.Secrets); err != nil {
		return e, err
	}
	if clientCert != nil && clientKey != nil {
		e.ClientCert = *clientCert
		if e.ClientKey, err = s.openClientKey(e.ID, *clientKey); err != nil {
			return e, err
		}
	}
	return e, nil
}

func (s *Store) collectEndpoints(rows pgx.Rows) ([]endpoint.Endpoint, error) {
	defer rows.Close()
	var out []endpoint.Endpoint
	for rows.Next() {
		e, err := s.scanEndpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading endpoints: %s", oneLine(err))
	}
	return out, nil
}

func nullInt(v int) *int32 {
	if v == 0 {
		return nil
	}
	n := int32(v)
	return &n
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullFloat(f float64) *float64 {
	if f == 0 {
		return nil
	}
	return &f
}

// endpointArgs are e's columns in endpointColumns order, its secrets sealed
// under the current key (when one is given).
func (s *Store) endpointArgs(e *endpoint.Endpoint) []any {
	types := e.EventTypes
	if types == nil {
		types = []string{}
	}
	headers := e.Headers
	if headers == nil {
		headers = map[string]string{} // jsonb '{}', not null
	}
	return append([]any{e.ID, e.Account, e.URL, e.Description, s.sealSecrets(e.ID, e.Secrets), types, string(e.Status),
		nullInt(e.MaxInFlight), nullInt(int(e.Timeout / time.Millisecond)), nullFloat(e.RatePerSec),
		nullTime(e.FailingSince), nullString(e.DisabledReason), nullTime(e.DisabledAt), headers, filterArg(e.Filter)}, append(s.clientCertArgs(e), e.SendTraceparent,
		string(endpoint.OrderingOf(e.Ordering)))...)
}

// CreateEndpoint inserts e after validating it. An empty status means
// active. It returns the stored row (timestamps filled), or
// ErrAlreadyExists when the id is taken: by a live endpoint of any
// account, or by a deleted one (ids are never reused; Postgres enforces it,
// see migration 00005).
func (s *Store) CreateEndpoint(ctx context.Context, e endpoint.Endpoint) (endpoint.Endpoint, error) {
	if e.Status == "" {
		e.Status = endpoint.StatusActive
	}
	if err := e.Validate(); err != nil {
		return e, err
	}
	row := s.pool.QueryRow(ctx, `INSERT INTO webhooks.endpoints
		(id, account, url, description, secrets, event_types, status, max_in_flight, timeout_ms, rate_per_sec,
		 failing_since, disabled_reason, disabled_at, headers, filter, client_cert, client_key, client_cert_not_after, send_traceparent,
		 ordering)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
		 $20)
		RETURNING `+endpointColumns, s.endpointArgs(&e)...)
	out, err := s.scanEndpoint(row)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return e, fmt.Errorf("endpoint %s: %w", e.ID, ErrAlreadyExists)
		}
		return e, fmt.Errorf("creating endpoint %s: %s", e.ID, oneLine(err))
	}
	return out, nil
}

// GetEndpoint returns the endpoint with id, or ErrNotFound.
func (s *Store) GetEndpoint(ctx context.Context, id string) (endpoint.Endpoint, error) {
	e, err := s.scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhooks.endpoints WHERE id = $1`, id))
	if err != nil {
		return e, readError(id, err)
	}
	return e, nil
}

// readError describes a failed read of endpoint id.
func readError(id string, err error) error {
	var ke *SecretKeyError
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	case errors.As(err, &ke):
		return err
	}
	return fmt.Errorf("reading endpoint %s: %s", id, oneLine(err))
}

// ListEndpointsParams filters ListEndpoints; zero fields match everything.
type ListEndpointsParams struct {
	Account string
	Status  endpoint.Status
	// Limit caps the rows returned; 0 means no limit.
	Limit int
}

// ListEndpoints returns the endpoints matching p, ordered by account and id.
func (s *Store) ListEndpoints(ctx context.Context, p ListEndpointsParams) ([]endpoint.Endpoint, error) {
	limit := any(nil)
	if p.Limit > 0 {
		limit = p.Limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhooks.endpoints
		WHERE ($1 = '' OR account = $1) AND ($2 = '' OR status = $2)
		ORDER BY account, id LIMIT $3`, p.Account, string(p.Status), limit)
	if err != nil {
		return nil, fmt.Errorf("listing endpoints: %s", oneLine(err))
	}
	return s.collectEndpoints(rows)
}

// ModifyEndpoint reads the endpoint with id under a row lock, lets change
// edit it, validates the result and writes it back with a fresh
// updated_at. The id and account cannot change. It returns ErrNotFound, the
// error of change, or a validation error (endpoint.ErrInvalid).
func (s *Store) ModifyEndpoint(ctx context.Context, id string, change func(*endpoint.Endpoint) error) (endpoint.Endpoint, error) {
	var out endpoint.Endpoint
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		e, err := s.scanEndpoint(tx.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhooks.endpoints WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return readError(id, err)
		}
		acct := e.Account
		if err := change(&e); err != nil {
			return err
		}
		e.ID, e.Account = id, acct
		if err := e.Validate(); err != nil {
			return err
		}
		args := s.endpointArgs(&e)
		out, err = s.scanEndpoint(tx.QueryRow(ctx, `UPDATE webhooks.endpoints SET
			url = $3, description = $4, secrets = $5, event_types = $6, status = $7, max_in_flight = $8,
			timeout_ms = $9, rate_per_sec = $10, failing_since = $11, disabled_reason = $12, disabled_at = $13,
			headers = $14, filter = $15,
			client_cert = $16, client_key = $17, client_cert_not_after = $18, send_traceparent = $19,
			ordering = $20, updated_at = now()
			WHERE id = $1 AND account = $2 RETURNING `+endpointColumns, args...))
		if err != nil {
			return fmt.Errorf("updating endpoint %s: %s", id, oneLine(err))
		}
		return nil
	})
	return out, err
}

// DeleteEndpoint removes the endpoint with id, or returns ErrNotFound.
// Its id stays taken (a tombstone in webhooks.endpoint_ids, written by a
// trigger in the same transaction), so no endpoint of any account can take
// it over. Deliveries already on Kafka for it are skipped by the
// dispatcher.
func (s *Store) DeleteEndpoint(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhooks.endpoints WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("deleting endpoint %s: %s", id, oneLine(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	return nil
}

// AllEndpoints returns every endpoint, for the in-memory index.
func (s *Store) AllEndpoints(ctx context.Context) ([]endpoint.Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhooks.endpoints`)
	if err != nil {
		return nil, fmt.Errorf("loading endpoints: %s", oneLine(err))
	}
	return s.collectEndpoints(rows)
}

// EndpointsByID returns the endpoints of ids that exist.
func (s *Store) EndpointsByID(ctx context.Context, ids []string) ([]endpoint.Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhooks.endpoints WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("loading endpoints: %s", oneLine(err))
	}
	return s.collectEndpoints(rows)
}

// ListenEndpointChanges takes a connection out of the pool, LISTENs on
// EndpointChannel, calls onListening (the caller's full reload: anything
// changed from then on is notified), then onChange for each notification,
// until ctx ends (it returns ctx's error) or the connection fails.
func (s *Store) ListenEndpointChanges(ctx context.Context, onListening func(context.Context) error, onChange func(id string)) error {
	return s.listen(ctx, EndpointChannel, "endpoint changes", onListening, onChange)
}

// listen LISTENs on channel on a connection of its own and calls onChange
// with each notification's payload, in order, until ctx ends or the
// connection fails (the error says which, naming what as the subject).
// onListening runs once the LISTEN is in place, so that a reload it makes
// misses no change.
func (s *Store) listen(ctx context.Context, channel, what string, onListening func(context.Context) error, onChange func(string)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting to listen for %s: %s", what, oneLine(err))
	}
	// The listening connection never goes back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return fmt.Errorf("listening for %s: %s", what, oneLine(err))
	}
	if err := onListening(ctx); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("waiting for %s: %s", what, oneLine(err))
		}
		onChange(n.Payload)
	}
}

// filterArg is an endpoint's payload filter as a query argument: SQL NULL
// when it has none, else its JSON text.
func filterArg(raw json.RawMessage) any {
	raw = endpoint.NormalizeFilter(raw)
	if raw == nil {
		return nil
	}
	return string(raw)
}

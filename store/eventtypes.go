package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookd/hookd/internal/eventtype"
)

// EventTypeChannel is the NOTIFY channel the event_types trigger signals
// on, with the type's name as payload.
const EventTypeChannel = "hookd_event_types"

const eventTypeColumns = `name, description, schema, example, deprecated, created_at, updated_at`

func scanEventType(row pgx.Row) (eventtype.Type, error) {
	var t eventtype.Type
	var schema, example []byte
	err := row.Scan(&t.Name, &t.Description, &schema, &example, &t.Deprecated, &t.CreatedAt, &t.UpdatedAt)
	t.Schema, t.Example = schema, example
	return t, translate(err)
}

// jsonArg is raw JSON for a jsonb column; nil is NULL.
func jsonArg(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// CreateEventType validates and inserts t, returning the stored row, a
// *eventtype.FieldError, or ErrAlreadyExists when the name is taken.
func (s *Store) CreateEventType(ctx context.Context, t eventtype.Type) (eventtype.Type, error) {
	if err := t.Validate(); err != nil {
		return t, err
	}
	out, err := scanEventType(s.pool.QueryRow(ctx, `INSERT INTO webhooks.event_types (name, description, schema, example, deprecated)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+eventTypeColumns,
		t.Name, t.Description, jsonArg(t.Schema), jsonArg(t.Example), t.Deprecated))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return t, fmt.Errorf("event type %s: %w", t.Name, ErrAlreadyExists)
		}
		return t, fmt.Errorf("creating event type %s: %s", t.Name, oneLine(err))
	}
	return out, nil
}

// GetEventType returns the catalogue entry name, or ErrNotFound.
func (s *Store) GetEventType(ctx context.Context, name string) (eventtype.Type, error) {
	t, err := scanEventType(s.pool.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM webhooks.event_types WHERE name = $1`, name))
	if errors.Is(err, ErrNotFound) {
		return t, fmt.Errorf("event type %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("reading event type %s: %s", name, oneLine(err))
	}
	return t, nil
}

// ListEventTypes returns the whole catalogue, by name.
func (s *Store) ListEventTypes(ctx context.Context) ([]eventtype.Type, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+eventTypeColumns+` FROM webhooks.event_types ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing event types: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventtype.Type, error) { return scanEventType(r) })
	if err != nil {
		return nil, fmt.Errorf("listing event types: %s", oneLine(err))
	}
	return out, nil
}

// AllEventTypes is ListEventTypes, for eventtype.Catalog.
func (s *Store) AllEventTypes(ctx context.Context) ([]eventtype.Type, error) {
	return s.ListEventTypes(ctx)
}

// ModifyEventType reads entry name under a row lock, lets change edit it,
// validates the result and writes it back with a fresh updated_at. The
// name cannot change. It returns ErrNotFound, the error of change, or a
// *eventtype.FieldError.
func (s *Store) ModifyEventType(ctx context.Context, name string, change func(*eventtype.Type) error) (eventtype.Type, error) {
	var out eventtype.Type
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		t, err := scanEventType(tx.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM webhooks.event_types WHERE name = $1 FOR UPDATE`, name))
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("event type %s: %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("reading event type %s: %s", name, oneLine(err))
		}
		if err := change(&t); err != nil {
			return err
		}
		t.Name = name
		if err := t.Validate(); err != nil {
			return err
		}
		out, err = scanEventType(tx.QueryRow(ctx, `UPDATE webhooks.event_types SET description = $2, schema = $3, example = $4,
			deprecated = $5, updated_at = now() WHERE name = $1 RETURNING `+eventTypeColumns,
			name, t.Description, jsonArg(t.Schema), jsonArg(t.Example), t.Deprecated))
		if err != nil {
			return fmt.Errorf("updating event type %s: %s", name, oneLine(err))
		}
		return nil
	})
	return out, err
}

// DeleteEventType removes entry name, or returns ErrNotFound. Endpoints
// subscribed to it keep their subscription: the catalogue documents types,
// it does not gate them.
func (s *Store) DeleteEventType(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhooks.event_types WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("deleting event type %s: %s", name, oneLine(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("event type %s: %w", name, ErrNotFound)
	}
	return nil
}

// ListenEventTypeChanges takes a connection out of the pool, LISTENs on
// EventTypeChannel, calls onListening (the caller's full reload), then
// onChange for each notification, until ctx ends (it returns ctx's error)
// or the connection fails.
func (s *Store) ListenEventTypeChanges(ctx context.Context, onListening func(context.Context) error, onChange func(name string)) error {
	return s.listen(ctx, EventTypeChannel, "event-type changes", onListening, onChange)
}

var _ eventtype.Source = (*Store)(nil)

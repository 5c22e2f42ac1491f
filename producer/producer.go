// Package producer is the Go client side of hookd's two ingress paths: Outbox
// inserts an event into webhooks.outbox inside the caller's own pgx
// transaction (so it is published if and only if that transaction commits),
// and Produce writes an event envelope to the events topic with a franz-go
// client. Both validate the event with package event's rules first, size
// included (ErrTooLarge), so an event hookd could never publish fails in the
// application, before it reaches the database or the broker. It never
// commits or rolls back the caller's transaction and never retries.
//
// Applications may import this package: it is part of hookd's supported Go API.
package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/producer/event"
)

// ErrTooLarge is matched (errors.Is) by the error for an event larger than
// hookd publishes: its envelope exceeds event.DefaultMaxBytes (256 KiB, the
// router's and relay's limit) or, for Outbox, its payload exceeds
// MaxPayloadBytes. The same error also matches event.ErrInvalid.
var ErrTooLarge = errors.New("event too large")

// MaxPayloadBytes is the largest payload webhooks.outbox accepts, counted
// as the database renders it (octet_length(payload::text): jsonb's text
// form, with a space after each ':' and ','): the envelope limit minus 1 KiB
// for the envelope's other fields. Migration 00006 enforces the same number
// with a trigger; Outbox checks it before the INSERT.
const MaxPayloadBytes = event.DefaultMaxBytes - 1024

// Event is what an application publishes.
type Event struct {
	// ID is the event id; empty means generated (a UUID in the outbox, a
	// derived id on the events topic).
	ID string
	// Account owns the event; required.
	Account string
	// Type is the event type, e.g. invoice.paid; required.
	Type string
	// Data is the payload: a json.RawMessage or []byte holding a JSON
	// object, or any value that encodes to one. Nil means {}.
	Data any
	// Created is when the event happened; zero means now (the outbox's
	// created_at default, or the record timestamp).
	Created time.Time
	// Traceparent is the W3C traceparent of the application's span
	// ("00-<trace id>-<span id>-<flags>"), optional: when hookd's tracing
	// is on, the event's spans continue that trace. Outbox writes it to
	// the traceparent column, Produce to the record's traceparent header.
	Traceparent string
}

func (e Event) envelope() (event.Envelope, []byte, error) {
	var data json.RawMessage
	switch d := e.Data.(type) {
	case nil:
	case json.RawMessage:
		data = d
	case []byte:
		data = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return event.Envelope{}, nil, fmt.Errorf("event data: %w", err)
		}
		data = b
	}
	env := event.Envelope{ID: e.ID, Account: e.Account, Type: e.Type, Data: data, Created: e.Created}
	raw, err := event.Marshal(env)
	if err != nil {
		return env, nil, err
	}
	// The router applies the same rules; failing here is kinder than a
	// dead letter later.
	parsed, err := event.Parse(raw, event.Origin{Timestamp: time.Now()}, 0)
	var ie *event.InvalidError
	if errors.As(err, &ie) && ie.Reason == event.ReasonOversize {
		return env, nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	if err != nil {
		return env, nil, fmt.Errorf("event: %w", err)
	}
	env.Data = parsed.Data
	return env, raw, nil
}

// Outbox inserts e into webhooks.outbox within tx and returns the event id.
// The relay publishes it once tx commits; if tx rolls back, it never is.
func Outbox(ctx context.Context, tx pgx.Tx, e Event) (string, error) {
	env, _, err := e.envelope()
	if err != nil {
		return "", err
	}
	if err := checkOutboxSize(env); err != nil {
		return "", err
	}
	var created *time.Time
	if !e.Created.IsZero() {
		created = &e.Created
	}
	var id string
	err = tx.QueryRow(ctx, `INSERT INTO webhooks.outbox (id, account, type, payload, created_at, traceparent)
		VALUES (COALESCE(NULLIF($1, ''), 'evt_' || replace(gen_random_uuid()::text, '-', '')), $2, $3, $4::jsonb, COALESCE($5, now()), NULLIF($6, ''))
		RETURNING id`, env.ID, env.Account, env.Type, string(env.Data), created, e.Traceparent).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("inserting into webhooks.outbox: %w", err)
	}
	return id, nil
}

// Produce writes e as an envelope to topic (keyed by account) and waits
// for the broker's acknowledgement.
func Produce(ctx context.Context, cl *kgo.Client, topic string, e Event) error {
	env, raw, err := e.envelope()
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(env.Account), Value: raw}
	if e.Traceparent != "" {
		rec.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte(e.Traceparent)}}
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("producing event to %s: %w", topic, err)
	}
	return nil
}

// checkOutboxSize refuses an event whose outbox row the database would
// refuse (payload over MaxPayloadBytes), or whose envelope as the relay
// will build it from the row (a generated 36-character id, created with
// microseconds) exceeds event.DefaultMaxBytes.
func checkOutboxSize(env event.Envelope) error {
	if n := jsonbTextLen(env.Data); n > MaxPayloadBytes {
		return fmt.Errorf("%w: %w", ErrTooLarge, &event.InvalidError{Reason: event.ReasonOversize,
			Detail: fmt.Sprintf("payload is %d bytes as webhooks.outbox stores it (payload::text), the limit is %d", n, MaxPayloadBytes)})
	}
	if env.ID == "" {
		env.ID = "evt_00000000000000000000000000000000" // as long as a generated id
	}
	if env.Created.IsZero() {
		env.Created = time.Date(2000, 1, 1, 0, 0, 0, 999999000, time.UTC)
	}
	env.Created = env.Created.Truncate(time.Microsecond)
	raw, err := event.Marshal(env)
	if err != nil {
		return err
	}
	if len(raw) > event.DefaultMaxBytes {
		return fmt.Errorf("%w: %w", ErrTooLarge, &event.InvalidError{Reason: event.ReasonOversize,
			Detail: fmt.Sprintf("envelope is %d bytes, the limit is %d", len(raw), event.DefaultMaxBytes)})
	}
	return nil
}

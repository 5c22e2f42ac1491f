package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/producer"
	"github.com/hookd/hookd/producer/event"
)

func TestOutbox(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.Store.Pool()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	id, err := producer.Outbox(ctx, tx, producer.Event{Account: "acct_1", Type: "invoice.paid", Data: map[string]string{"invoice": "in_1"}})
	require.NoError(t, err)
	require.Regexp(t, `^evt_[0-9a-f]{32}$`, id, "a generated id has the ingress topic's shape")
	var plain string // a plain INSERT without an id gets the same shape
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO webhooks.outbox (account, type, payload) VALUES ('acct_1', 'invoice.paid', '{}') RETURNING id`).Scan(&plain))
	require.Regexp(t, `^evt_[0-9a-f]{32}$`, plain)
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: "evt_x", Account: "acct_1", Type: "invoice.paid", Data: json.RawMessage(`{"a":1}`),
		Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: "evt_rb", Account: "acct_1", Type: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhooks.outbox`).Scan(&n))
	require.Equal(t, 3, n)
	var payload string
	var created time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT payload::text, created_at FROM webhooks.outbox WHERE id = 'evt_x'`).Scan(&payload, &created))
	require.JSONEq(t, `{"a":1}`, payload)
	require.True(t, created.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))

	// Invalid events are refused before touching the transaction.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	for _, e := range []producer.Event{
		{Type: "t"}, {Account: "a"}, {Account: "a", Type: "t", Data: []int{1}}, {Account: "a b", Type: "t"},
	} {
		_, err := producer.Outbox(ctx, tx, e)
		require.ErrorIs(t, err, event.ErrInvalid, "%+v", e)
	}
}

func TestProduce(t *testing.T) {
	t.Parallel()
	tc := topics.Config{Partitions: 1}
	k := kafkatest.NewProvisioned(t, tc)
	names := topics.NamesFor(tc)
	cl := k.Client(t, kgo.ConsumeTopics(names.Events), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, producer.Produce(ctx, cl, names.Events, producer.Event{ID: "evt_1", Account: "acct_1", Type: "invoice.paid", Data: map[string]int{"n": 1}}))
	require.ErrorIs(t, producer.Produce(ctx, cl, names.Events, producer.Event{Account: "acct_1"}), event.ErrInvalid)
	f := cl.PollFetches(ctx)
	require.NoError(t, f.Err())
	recs := f.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "acct_1", string(recs[0].Key))
	env, err := event.Parse(recs[0].Value, event.Origin{}, 0)
	require.NoError(t, err)
	require.Equal(t, "evt_1", env.ID)
	require.JSONEq(t, `{"n":1}`, string(env.Data))
}

// TestOutboxSizeLimit: the Go helper and the database agree on the outbox
// limit to the byte, the helper refuses before the INSERT (the
// transaction stays usable), and a row that skips the helper is refused by
// the database inside the application's transaction.
func TestOutboxSizeLimit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.Store.Pool()
	// payload(k) is {"x":"a...a"}, which the database renders as
	// {"x": "a...a"}: k + 9 bytes.
	payload := func(k int) json.RawMessage { return json.RawMessage(`{"x":"` + strings.Repeat("a", k) + `"}`) }
	atLimit, overLimit := payload(producer.MaxPayloadBytes-9), payload(producer.MaxPayloadBytes-8)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: "evt_over", Account: "acct_1", Type: "t", Data: overLimit})
	require.ErrorIs(t, err, producer.ErrTooLarge)
	require.ErrorIs(t, err, event.ErrInvalid)
	require.ErrorContains(t, err, fmt.Sprintf("payload is %d bytes as webhooks.outbox stores it (payload::text), the limit is %d",
		producer.MaxPayloadBytes+1, producer.MaxPayloadBytes))
	// Escaping: under the payload limit in the database, but '<' is
	// \u003c in the envelope the relay builds, 6 bytes each.
	_, err = producer.Outbox(ctx, tx, producer.Event{Account: "acct_1", Type: "t", Data: map[string]string{"x": strings.Repeat("<", 50000)}})
	require.ErrorIs(t, err, producer.ErrTooLarge)
	require.ErrorContains(t, err, "envelope is")
	// Refused before the INSERT: the transaction is still usable.
	_, err = producer.Outbox(ctx, tx, producer.Event{ID: "evt_at", Account: "acct_1", Type: "t", Data: atLimit})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	var size int
	require.NoError(t, pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM webhooks.outbox WHERE id = 'evt_at'`).Scan(&size))
	require.Equal(t, producer.MaxPayloadBytes, size)

	// Without the helper, the database refuses it in the application's
	// transaction.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type, payload) VALUES ('evt_sql', 'acct_1', 't', $1::jsonb)`, string(overLimit))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code, "check_violation")
	require.Equal(t, "outbox_payload_size", pgErr.ConstraintName)
	require.Equal(t, fmt.Sprintf("webhooks.outbox payload is %d bytes, the limit is %d", producer.MaxPayloadBytes+1, producer.MaxPayloadBytes), pgErr.Message)
	// The repro.
	_, err = pool.Exec(ctx, `INSERT INTO webhooks.outbox (account, type, payload) VALUES ('acctA', 'inv.paid', jsonb_build_object('x', repeat('a', 2*1024*1024)))`)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code)
	require.Contains(t, pgErr.Message, "webhooks.outbox payload is 2097161 bytes")
}

func TestProduceTooLarge(t *testing.T) {
	t.Parallel()
	tc := topics.Config{Partitions: 1}
	k := kafkatest.NewProvisioned(t, tc)
	cl := k.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := producer.Produce(ctx, cl, topics.NamesFor(tc).Events, producer.Event{Account: "acct_1", Type: "t",
		Data: map[string]string{"x": strings.Repeat("a", event.DefaultMaxBytes)}})
	require.ErrorIs(t, err, producer.ErrTooLarge)
	require.ErrorIs(t, err, event.ErrInvalid)
}

package producer_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/event"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/producer"
	"github.com/hookd/hookd/topics"
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
	require.Len(t, id, 36, "generated UUID")
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
	require.Equal(t, 2, n)
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

package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// Delivered answers a batch in one query: only rows of the key's own
// account, and only in state delivered, including a dead delivery that a
// replay's attempt delivered (as the attempt-log writer records it).
func TestDeliveredIsPerAccountAndBatched(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")
	write(t, db, t0, rec("d_dead", "ep1", 1, attempt.OutcomeRetry, attempt.NextDeadLetter),
		rec("d_ok", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone),
		rec("d_replayed", "ep1", 1, attempt.OutcomeRetry, attempt.NextDeadLetter))
	deliveryRowOf(t, db, "d_other", "evt_9", "ep9", "acct_2", "delivered")

	keys := func(ids ...string) []store.DeliveryKey {
		out := make([]store.DeliveryKey, 0, len(ids))
		for _, id := range ids {
			out = append(out, store.DeliveryKey{Account: "acct_1", ID: id})
		}
		return out
	}
	all := keys("d_dead", "d_ok", "d_replayed", "d_other", "d_none", "d_ok")
	got, err := db.Store.Delivered(ctx, all)
	require.NoError(t, err)
	require.Equal(t, map[store.DeliveryKey]bool{{Account: "acct_1", ID: "d_ok"}: true}, got,
		"d_other is acct_2's: not acct_1's, whatever its state")

	// A replay of d_replayed's dead letter delivers it.
	replayed := rec("d_replayed", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
	replayed.AttemptID, replayed.ReplayID, replayed.StartedAt = "d_replayed-replay-a1", "rpl_1", t0.Add(time.Hour)
	write(t, db, t0.Add(time.Hour), replayed)
	got, err = db.Store.Delivered(ctx, all)
	require.NoError(t, err)
	require.Equal(t, map[store.DeliveryKey]bool{{Account: "acct_1", ID: "d_ok"}: true, {Account: "acct_1", ID: "d_replayed"}: true}, got)

	got, err = db.Store.Delivered(ctx, []store.DeliveryKey{{Account: "acct_2", ID: "d_other"}, {Account: "acct_2", ID: "d_ok"}})
	require.NoError(t, err)
	require.Equal(t, map[store.DeliveryKey]bool{{Account: "acct_2", ID: "d_other"}: true}, got)

	got, err = db.Store.Delivered(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// BenchmarkDelivered measures one batch look-up of replay's resolved
// check: 2000 keys (a full fetch of dead letters) against 100k delivery
// rows, a tenth of them delivered.
func BenchmarkDelivered(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	_, err := db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, status, event_created_at)
		SELECT 'dlv_' || i, 'evt_' || i, 'ep_' || (i % 100), 'acct_bench', 'invoice.paid',
			CASE WHEN i % 10 = 0 THEN 'delivered' ELSE 'dead' END, now()
		FROM generate_series(1, 100000) i`)
	require.NoError(b, err)
	_, err = db.Store.Pool().Exec(ctx, `ANALYZE webhooks.deliveries`)
	require.NoError(b, err)
	keys := make([]store.DeliveryKey, 2000)
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		for i := range keys {
			keys[i] = store.DeliveryKey{Account: "acct_bench", ID: fmt.Sprintf("dlv_%d", 1+(n*2000+i)%100000)}
		}
		got, err := db.Store.Delivered(ctx, keys)
		require.NoError(b, err)
		require.Len(b, got, 200)
	}
}

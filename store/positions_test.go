package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// pending is delivery d's record on the deliveries topic at offset off of
// partition 0.
func pending(d string, off int64) store.PendingDelivery {
	return store.PendingDelivery{ID: d, EventID: "evt-" + d, EndpointID: "ep1", Account: "acct_1", EventType: "invoice.paid",
		EventCreated: t0, Topic: "webhooks.deliveries", Partition: 0, Offset: off}
}

// position is delivery d's record position, "" when the row has none.
func position(t *testing.T, db *pgtest.DB, d string) string {
	t.Helper()
	var pos *string
	require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT record_topic || '/' || record_partition || '/' || record_offset
		FROM webhooks.deliveries WHERE id = $1`, d).Scan(&pos))
	if pos == nil {
		return ""
	}
	return *pos
}

// TestWriteAttemptsRecordPositions: a delivery row holds the position of
// the first record read for it, whichever arrived first, its record or
// its attempt, and in whichever kind of batch; a later copy (a replay)
// never moves it.
func TestWriteAttemptsRecordPositions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	ctx := context.Background()
	writeBatch := func(ps []store.PendingDelivery, recs ...*attempt.Record) {
		t.Helper()
		_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Pending: ps, Now: t0, DisableAfter: 72 * time.Hour})
		require.NoError(t, err)
	}
	retry := func(d string, n int) *attempt.Record {
		return rec(d, "ep1", n, attempt.OutcomeRetry, attempt.NextRetry)
	}

	// A record and its attempt in one batch: the row is inserted with it;
	// of two copies in the batch, the lower offset counts.
	writeBatch([]store.PendingDelivery{pending("together", 12), pending("together", 11)}, retry("together", 1))
	require.Equal(t, "webhooks.deliveries/0/11", position(t, db, "together"))

	// The attempt first, its record in a later batch with the next
	// attempt (the row exists then, and is updated).
	writeBatch(nil, retry("late", 1))
	require.Empty(t, position(t, db, "late"))
	writeBatch([]store.PendingDelivery{pending("late", 20)}, retry("late", 2))
	require.Equal(t, "webhooks.deliveries/0/20", position(t, db, "late"))

	// The attempt first, its record in a batch without attempts of its
	// own (next to another delivery's), and in a pending-only batch.
	writeBatch(nil, retry("alone", 1), retry("lone", 1))
	writeBatch([]store.PendingDelivery{pending("alone", 30)}, retry("other", 1))
	require.Equal(t, "webhooks.deliveries/0/30", position(t, db, "alone"))
	_, err := db.Store.WritePendingDeliveries(ctx, []store.PendingDelivery{pending("lone", 31), pending("fresh", 32)})
	require.NoError(t, err)
	require.Equal(t, "webhooks.deliveries/0/31", position(t, db, "lone"))
	require.Equal(t, "webhooks.deliveries/0/32", position(t, db, "fresh"))

	// Copies read later (a replay of the topic, a replayed delivery) move
	// nothing, with an attempt or without.
	writeBatch([]store.PendingDelivery{pending("together", 40), pending("late", 41)}, retry("together", 2))
	_, err = db.Store.WritePendingDeliveries(ctx, []store.PendingDelivery{pending("fresh", 42)})
	require.NoError(t, err)
	for d, want := range map[string]string{"together": "11", "late": "20", "fresh": "32"} {
		require.Equal(t, "webhooks.deliveries/0/"+want, position(t, db, d), d)
	}

	// Another account's record never writes this account's row.
	writeBatch(nil, retry("mine", 1))
	theirs := pending("mine", 50)
	theirs.Account = "acct_2"
	writeBatch([]store.PendingDelivery{theirs}, retry("other", 2))
	require.Empty(t, position(t, db, "mine"))
}

// TestWriteAttemptsFirstAttemptHoldsItsSource: a first attempt read before
// its delivery record creates the row with that record's position (the
// attempt's source), so the record read later writes nothing: the row is
// not updated (its xmin stays). A replay's or a retry's attempt leaves its
// source out (a copy of the record).
func TestWriteAttemptsFirstAttemptHoldsItsSource(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	addEndpoint(t, db, "ep1")
	ctx := context.Background()
	sourced := func(d string, n int, off int64) *attempt.Record {
		r := rec(d, "ep1", n, attempt.OutcomeDelivered, attempt.NextDone)
		r.Source = &attempt.Position{Topic: "webhooks.deliveries", Partition: 0, Offset: off}
		return r
	}
	writeBatch := func(ps []store.PendingDelivery, recs ...*attempt.Record) {
		t.Helper()
		_, err := db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Pending: ps, Now: t0, DisableAfter: 72 * time.Hour})
		require.NoError(t, err)
	}
	xmin := func(d string) string {
		t.Helper()
		var x string
		require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT xmin::text FROM webhooks.deliveries WHERE id = $1`, d).Scan(&x))
		return x
	}

	writeBatch(nil, sourced("first", 1, 60), sourced("first2", 1, 61))
	require.Equal(t, "webhooks.deliveries/0/60", position(t, db, "first"))
	require.Equal(t, "webhooks.deliveries/0/61", position(t, db, "first2"))
	before, before2 := xmin("first"), xmin("first2")
	writeBatch([]store.PendingDelivery{pending("first", 60)}, sourced("other", 1, 62))
	_, err := db.Store.WritePendingDeliveries(ctx, []store.PendingDelivery{pending("first2", 61)})
	require.NoError(t, err)
	require.Equal(t, before, xmin("first"), "the record read after its attempt updated the row")
	require.Equal(t, before2, xmin("first2"), "the record read after its attempt updated the row")

	replayed := sourced("replayed", 1, 70)
	replayed.ReplayID = "rpl_1"
	writeBatch(nil, replayed, sourced("retried", 2, 71))
	require.Empty(t, position(t, db, "replayed"))
	require.Empty(t, position(t, db, "retried"))
}

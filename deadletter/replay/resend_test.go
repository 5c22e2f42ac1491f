package replay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// ResendDelivery sends one delivery of the asking account only, once per
// call, records the send (so its dead letters count as resolved), and
// refuses, sending nothing, another account's delivery, a payload whose
// record is another delivery's, and a deleted endpoint.
func TestResendDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	now := time.Now().UTC()
	pending := func(evt string, rec *store.PendingDelivery) string {
		body, err := delivery.Body(evt, "invoice.paid", now, []byte(`{}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, "ep_a"), EventID: evt, EventType: "invoice.paid", EndpointID: "ep_a",
			Account: "acct_a", EventCreated: now, Attempt: 1, Body: body}
		kr := d.Record(b.deps.Names.Deliveries)
		require.NoError(t, b.cl.ProduceSync(ctx, kr).FirstErr())
		p := store.PendingDelivery{ID: d.ID, EventID: evt, EndpointID: "ep_a", Account: "acct_a", EventType: "invoice.paid",
			EventCreated: now, Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset}
		if rec != nil {
			p.Topic, p.Partition, p.Offset = rec.Topic, rec.Partition, rec.Offset
		}
		require.NoError(t, b.db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{p}))
		return d.ID
	}
	id := pending("evt_1", nil)

	_, err := ResendDelivery(ctx, b.deps, DeliveryResend{Account: "acct_b", DeliveryID: id, Actor: "b", Reason: "r"})
	require.ErrorIs(t, err, ErrDeliveryNotFound)
	_, err = ResendDelivery(ctx, b.deps, DeliveryResend{Account: "acct_a", DeliveryID: id, Actor: "a"})
	require.ErrorIs(t, err, ErrInvalid, "a reason is required")
	for range 2 {
		row, err := ResendDelivery(ctx, b.deps, DeliveryResend{Account: "acct_a", DeliveryID: id, Actor: "a", Reason: "again"})
		require.NoError(t, err)
		require.Equal(t, store.ReplayDone, row.Status)
	}
	got := b.replayed(t)
	require.Len(t, got["evt_1"], 2, "each resend sends")
	sent, err := b.db.Store.LastReplaySends(ctx, []store.DeliveryKey{{Account: "acct_a", ID: id}, {Account: "acct_b", ID: id}})
	require.NoError(t, err)
	require.Len(t, sent, 1)

	// A row pointing at another delivery's record: refused, never shown.
	d, err := b.db.Store.GetDelivery(ctx, "acct_a", id)
	require.NoError(t, err)
	other := pending("evt_2", &store.PendingDelivery{Topic: d.RecordTopic, Partition: *d.RecordPartition, Offset: *d.RecordOffset})
	_, err = ResendDelivery(ctx, b.deps, DeliveryResend{Account: "acct_a", DeliveryID: other, Actor: "a", Reason: "r"})
	require.ErrorIs(t, err, ErrPayloadMismatch)

	require.NoError(t, b.db.Store.DeleteEndpoint(ctx, "ep_a"))
	_, err = ResendDelivery(ctx, b.deps, DeliveryResend{DeliveryID: id, Actor: "ops", Reason: "r"})
	require.ErrorIs(t, err, ErrEndpointNotFound)
	require.Len(t, b.replayed(t)["evt_1"], 2, "nothing more was sent")
}

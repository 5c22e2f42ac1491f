package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// Issue 32: hookctl deliveries resend sends any delivery again (here a
// delivered one), read from the deliveries topic, audited as a replay.
func TestDeliveriesResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.endpoint(t, "ep_s", "acct_s", false)
	now := time.Now().UTC()
	body, err := delivery.Body("evt_s", "invoice.paid", now, []byte(`{"n":1}`))
	require.NoError(t, err)
	d := delivery.Delivery{ID: delivery.ID("evt_s", "ep_s"), EventID: "evt_s", EventType: "invoice.paid", EndpointID: "ep_s",
		Account: "acct_s", EventCreated: now, Attempt: 1, Body: body}
	rec := d.Record(e.names.Deliveries)
	require.NoError(t, e.cluster.Client(t).ProduceSync(ctx, rec).FirstErr())
	require.NoError(t, e.db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{{ID: d.ID, EventID: d.EventID,
		EndpointID: d.EndpointID, Account: d.Account, EventType: d.EventType, EventCreated: now,
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}}))

	code, out, errOut := e.run(t, "deliveries", "resend", d.ID, "--reason", "customer asked", "--actor", "ann")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "resent "+d.ID+" as rpl_dv_")
	require.Equal(t, map[string]int{"evt_s": 1}, e.replayedEvents(t))
	rs, err := e.db.Store.ListReplays(ctx, store.ListReplaysParams{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "delivery", rs[0].Kind)
	require.Equal(t, "ann", rs[0].Actor)
	require.Equal(t, "customer asked", rs[0].Reason)

	code, _, errOut = e.run(t, "deliveries", "resend", "dlv_nope", "--actor", "ann")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "delivery not found")
}

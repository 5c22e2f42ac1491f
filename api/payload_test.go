package api

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// pendingDelivery produces a delivery record for endpoint ep of account to
// the deliveries topic and writes its pending row with the record's
// position, as the attempt-log writer does.
func (b *bundle) pendingDelivery(t *testing.T, evt, ep, account, data string) (string, *kgo.Record) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	body, err := delivery.Body(evt, "invoice.paid", now, []byte(data))
	require.NoError(t, err)
	d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: account,
		EventCreated: now, Attempt: 1, Body: body}
	rec := d.Record(b.names.Deliveries)
	require.NoError(t, b.cluster.Client(t).ProduceSync(ctx, rec).FirstErr())
	require.NoError(t, b.db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{{ID: d.ID, EventID: evt, EndpointID: ep,
		Account: account, EventType: "invoice.paid", EventCreated: now, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}}))
	return d.ID, rec
}

// The payload of any delivery is read from the deliveries topic, for its
// own account only; an expired record and an unrecorded position say so.
func TestDeliveryPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, rec := b.pendingDelivery(t, "evt_pay", b.epA, "acct_a", `{"amount":1200}`)

	var got payloadOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/deliveries/"+id+"/payload", "", &got))
	require.Equal(t, "deliveries", got.Source)
	require.JSONEq(t, string(rec.Value), string(got.Payload))
	require.Equal(t, len(rec.Value), got.Bytes)
	require.Equal(t, rec.Offset, got.Offset)
	var d store.Delivery
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/deliveries/"+id, "", &d))
	require.Equal(t, b.names.Deliveries, d.RecordTopic)

	var e apiError
	require.Equal(t, 404, b.do(t, b.tokB, "GET", "/v1/deliveries/"+id+"/payload", "", &e), "another account's delivery")
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/deliveries/"+id+"/payload", "", nil))

	// A row logged without a record position (as before migration 17).
	old := delivery.ID("evt_old", b.epA)
	require.NoError(t, b.db.Store.InsertPendingDeliveries(context.Background(), []store.PendingDelivery{{ID: old,
		EventID: "evt_old", EndpointID: b.epA, Account: "acct_a", EventType: "invoice.paid", EventCreated: time.Now()}}))
	require.Equal(t, 410, b.do(t, b.tokA, "GET", "/v1/deliveries/"+old+"/payload", "", &e))
	require.Equal(t, "payload_unknown", e.Error.Code)

	// Retention drops the record: said plainly.
	adm := kadm.NewClient(b.cluster.Client(t))
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: rec.Topic, Partition: rec.Partition, At: rec.Offset + 1})
	res, err := adm.DeleteRecords(context.Background(), offs)
	require.NoError(t, err)
	require.NoError(t, res.Error())
	require.Equal(t, 410, b.do(t, b.tokA, "GET", "/v1/deliveries/"+id+"/payload", "", &e))
	require.Equal(t, "payload_expired", e.Error.Code)
	require.Equal(t, 410, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{"reason":"again"}`, &e))
	require.Equal(t, "payload_expired", e.Error.Code)
}

// A delivery is resent with its webhook-id and body, audited as a replay
// of kind delivery in the caller's account; another account's is a 404.
func TestDeliveryResend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, rec := b.pendingDelivery(t, "evt_again", b.epA, "acct_a", `{"amount":7}`)

	var e apiError
	require.Equal(t, 404, b.do(t, b.tokB, "POST", "/v1/deliveries/"+id+"/resend", `{"reason":"x"}`, &e))
	var row store.Replay
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{"reason":"lost it","actor":"ann"}`, &row))
	require.Equal(t, replay.KindDelivery, row.Kind)
	require.Equal(t, store.ReplayDone, row.Status)
	require.Equal(t, int64(1), row.Replayed)
	require.Equal(t, "api:acct_a/ann", row.Actor)
	require.Equal(t, "acct_a", row.Account)

	// The resent record: same key, body and ids, attempt 1, the replay id.
	cl := b.cluster.Client(t, kgo.ConsumeTopics(b.names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var resent *delivery.Delivery
	wait.For(t, 10*time.Second, "the resent record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if d, err := delivery.Decode(r); err == nil && d.ReplayID == row.ID {
				resent = d
				require.Equal(t, rec.Value, r.Value)
			}
		})
		return resent != nil
	})
	require.Equal(t, "evt_again", resent.EventID)
	require.Equal(t, id, resent.ID)
	require.Equal(t, 1, resent.Attempt)

	// Listed in the account's replays; the operators' list has it too.
	var list struct{ Data []store.Replay }
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/replays", "", &list))
	require.Len(t, list.Data, 1)
	var filter map[string]string
	require.NoError(t, json.Unmarshal(list.Data[0].Filter, &filter))
	require.Equal(t, id, filter["delivery_id"])

	// A disabled endpoint refuses without force.
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+b.epA, `{"status":"disabled"}`, nil))
	require.Equal(t, 409, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{}`, &e))
	require.Equal(t, "endpoint_disabled", e.Error.Code)
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{"force":true}`, &row))
	require.Equal(t, "resend of delivery "+id, row.Reason)

	// A resend takes a replay slot while it runs: none free, 429.
	for range b.api.cfg.MaxReplaysPerAccount {
		require.True(t, b.api.replays.acquire("acct_a", b.api.cfg.MaxReplays, b.api.cfg.MaxReplaysPerAccount))
	}
	require.Equal(t, 429, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{"force":true}`, &e))
	require.Equal(t, "too_many_replays", e.Error.Code)
	b.api.replays.release("acct_a")
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/deliveries/"+id+"/resend", `{"force":true}`, nil))
}

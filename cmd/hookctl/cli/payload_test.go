package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// Issue 32: hookctl deliveries payload prints the exact body sent, read
// from the deliveries topic at the delivery's recorded position; an
// unknown delivery, an unrecorded position, a record retention dropped and
// a topic Kafka cannot answer for each get one clear line.
func TestDeliveriesPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.endpoint(t, "ep_p", "acct_p", false)
	now := time.Now().UTC()
	body, err := delivery.Body("evt_p", "invoice.paid", now, []byte(`{"amount":1200}`))
	require.NoError(t, err)
	d := delivery.Delivery{ID: delivery.ID("evt_p", "ep_p"), EventID: "evt_p", EventType: "invoice.paid", EndpointID: "ep_p",
		Account: "acct_p", EventCreated: now, Attempt: 1, Body: body}
	rec := d.Record(e.names.Deliveries)
	require.NoError(t, e.cluster.Client(t).ProduceSync(ctx, rec).FirstErr())
	pending := func(id, evt, topic string) {
		require.NoError(t, e.db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{{ID: id, EventID: evt,
			EndpointID: "ep_p", Account: "acct_p", EventType: "invoice.paid", EventCreated: now,
			Topic: topic, Partition: rec.Partition, Offset: rec.Offset}}))
	}
	pending(d.ID, "evt_p", rec.Topic)

	code, out, errOut := e.run(t, "deliveries", "payload", d.ID)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, string(rec.Value)+"\n", out, "the exact body, as is")

	code, out, errOut = e.run(t, "-o", "json", "deliveries", "payload", d.ID)
	require.Equal(t, 0, code, errOut)
	var got struct {
		Source string          `json:"source"`
		Offset int64           `json:"offset"`
		Bytes  int             `json:"bytes"`
		Body   json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "deliveries", got.Source)
	require.Equal(t, rec.Offset, got.Offset)
	require.Equal(t, len(rec.Value), got.Bytes)
	require.JSONEq(t, string(rec.Value), string(got.Body))

	oneLine := func(errOut, want string) {
		t.Helper()
		require.Contains(t, errOut, want)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
	code, _, errOut = e.run(t, "deliveries", "payload", "dlv_nope")
	require.Equal(t, 2, code)
	oneLine(errOut, "hookctl: no delivery dlv_nope in the delivery log")

	// Logged before positions were recorded (migration 17).
	old := delivery.ID("evt_old", "ep_p")
	require.NoError(t, e.db.Store.InsertPendingDeliveries(ctx, []store.PendingDelivery{{ID: old, EventID: "evt_old",
		EndpointID: "ep_p", Account: "acct_p", EventType: "invoice.paid", EventCreated: now}}))
	code, _, errOut = e.run(t, "deliveries", "payload", old)
	require.Equal(t, 2, code)
	oneLine(errOut, "the delivery was logged before hookd recorded where its record is kept")

	// A topic Kafka has no answer for: unavailable, worth a retry (exit 1).
	lost := delivery.ID("evt_lost", "ep_p")
	pending(lost, "evt_lost", "no-such-topic")
	code, _, errOut = e.run(t, "deliveries", "payload", lost, "--timeout", "1s")
	require.Equal(t, 1, code)
	oneLine(errOut, "cannot be read now: Kafka did not answer in time; try again")

	// Retention drops the record.
	adm := kadm.NewClient(e.cluster.Client(t))
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: rec.Topic, Partition: rec.Partition, At: rec.Offset + 1})
	res, err := adm.DeleteRecords(ctx, offs)
	require.NoError(t, err)
	require.NoError(t, res.Error())
	code, out, errOut = e.run(t, "deliveries", "payload", d.ID)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	oneLine(errOut, "the payload of "+d.ID+" is no longer retained by Kafka")
}

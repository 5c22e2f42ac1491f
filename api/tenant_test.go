package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

func deliveryIDsOf(ds []store.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// Rows of account B under account A's endpoint id, and B's attempts under
// A's delivery id (left by an id reuse before ids were kept, or forged),
// never show to A, whatever the route; the admin token sees each under its
// own account.
func TestTenantDeliveryLogIsScopedByAccount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pool := b.db.Store.Pool()
	_, err := pool.Exec(ctx, `INSERT INTO webhooks.deliveries (id, event_id, endpoint_id, account, event_type, event_created_at)
		VALUES ('dlv_b_under_a', 'evt_a', $1, 'acct_b', 'invoice.paid', now())`, b.epA)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO webhooks.attempts (attempt_id, delivery_id, event_id, endpoint_id, account, attempt,
		tier, started_at, duration_ms, status_code, outcome, next_action)
		VALUES ('att_b_under_a', $1, 'evt_a', $2, 'acct_b', 1, 'webhooks.deliveries', now(), 3, 200, 'delivered', 'done')`, b.dlvA, b.epA)
	require.NoError(t, err)

	for _, tok := range []string{b.tokA, adminToken} {
		var ds struct{ Data []store.Delivery }
		require.Equal(t, 200, b.do(t, tok, "GET", "/v1/endpoints/"+b.epA+"/deliveries", "", &ds))
		require.Equal(t, []string{b.dlvA}, deliveryIDsOf(ds.Data), "B's row never lists under A's endpoint")

		var tl deliveryOut
		require.Equal(t, 200, b.do(t, tok, "GET", "/v1/deliveries/"+b.dlvA, "", &tl))
		require.Len(t, tl.Timeline, 1, "B's attempt is not in A's timeline")
		require.Equal(t, "att_evt_a", tl.Timeline[0].AttemptID)
	}
	require.Equal(t, 404, b.do(t, b.tokA, "GET", "/v1/deliveries/dlv_b_under_a", "", nil))
	var tl deliveryOut
	require.Equal(t, 200, b.do(t, b.tokB, "GET", "/v1/deliveries/dlv_b_under_a", "", &tl))
	require.Equal(t, "acct_b", tl.Account)

	events := func(tok string) []string {
		var ev struct{ Data []deliveryOut }
		require.Equal(t, 200, b.do(t, tok, "GET", "/v1/events/evt_a/deliveries", "", &ev))
		var out []string
		for _, d := range ev.Data {
			out = append(out, d.ID)
		}
		return out
	}
	require.Equal(t, []string{b.dlvA}, events(b.tokA))
	require.Equal(t, []string{"dlv_b_under_a"}, events(b.tokB))
	require.ElementsMatch(t, []string{b.dlvA, "dlv_b_under_a"}, events(adminToken))
}

// Issue 11 item 5: a replay whose reason or actor holds a NUL byte, or is
// absurdly long, answers 400 naming the field and writes nothing (it used
// to answer 202 with a location that then 404ed); a 202 always points to
// an audit row that exists.
func TestTenantReplayInputIsCheckedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("r", replay.MaxReasonLen+1)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/replays", `{"reason":"INC\u00001"}`, "reason"},
		{"/v1/replays", `{"reason":"INC-1","actor":"bot\u0000"}`, "actor"},
		{"/v1/replays", `{"reason":"` + long + `"}`, "reason"},
		{"/v1/replays", `{"reason":"INC\u00001","dry_run":true}`, "reason"},
		{"/v1/endpoints/" + b.epA + "/resend", `{"since":"1h","reason":"INC\u00001"}`, "reason"},
		{"/v1/endpoints/" + b.epA + "/resend", `{"since":"1h","actor":"` + strings.Repeat("a", 300) + `"}`, "actor"},
	} {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, "POST", c.path, c.body, &e), c.body)
		require.Equal(t, "invalid", e.Error.Code)
		require.Contains(t, e.Error.Message, c.field+":", c.body)
	}
	var rs struct{ Data []store.Replay }
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/replays", "", &rs))
	require.Empty(t, rs.Data, "nothing half-written")

	// A 202's location exists at once, before the background run.
	var started map[string]any
	require.Equal(t, 202, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"INC-2"}`, &started))
	var row store.Replay
	require.Equal(t, 200, b.do(t, b.tokA, "GET", started["location"].(string), "", &row))
	require.Equal(t, "INC-2", row.Reason)

	// An explicit id naming another request: 409, never a 200 with the
	// other request's row, nor a 202 that then fails.
	wait.For(t, 20*time.Second, "the replay done", func() bool {
		require.Equal(t, 200, b.do(t, b.tokA, "GET", started["location"].(string), "", &row))
		return row.Status == store.ReplayDone
	})
	var e apiError
	require.Equal(t, 409, b.do(t, adminToken, "POST", "/v1/replays", `{"id":"`+row.ID+`","reason":"other"}`, &e))
	require.Equal(t, "conflict", e.Error.Code)
	// Another account naming that id gets a replay of its own (issue 29:
	// ids are per account), never A's row.
	require.Equal(t, 202, b.do(t, b.tokB, "POST", "/v1/replays", `{"id":"`+row.ID+`","reason":"INC-2"}`, &started))
	var rowB store.Replay
	require.Equal(t, 200, b.do(t, b.tokB, "GET", started["location"].(string), "", &rowB))
	require.Equal(t, "acct_b", rowB.Account)
}

// The repro of issue 11 item 1, end to end with a real store and broker:
// B's endpoint ep_shared is deleted with a dead letter and a retry
// pending; A cannot take its id; and even if A holds it (an id taken over
// before ids were kept), B's records never list under A, are never marked
// delivered by A's attempts, and B's replay sends nothing to A.
func TestTenantEndpointIDReuseRepro(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	st := b.db.Store
	create := func(account, url string) error {
		_, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_shared", Account: account, URL: url,
			Secrets: []string{endpoint.NewSecret()}})
		return err
	}
	require.NoError(t, create("acct_b", "http://127.0.0.1:1/b"))
	dlv := b.delivery(t, "evt_shared", "ep_shared", "acct_b") // B's attempt, dead-lettered
	require.Equal(t, 204, b.do(t, b.tokB, "DELETE", "/v1/endpoints/ep_shared", "", nil))

	require.ErrorIs(t, create("acct_a", "http://127.0.0.1:2/a"), store.ErrAlreadyExists, "the id of a deleted endpoint is never reused")
	require.ErrorIs(t, create("acct_b", "http://127.0.0.1:2/b"), store.ErrAlreadyExists)

	// As if ep_shared had been deleted before ids were kept: A takes it.
	_, err := st.Pool().Exec(ctx, `DELETE FROM webhooks.endpoint_ids WHERE id = 'ep_shared'`)
	require.NoError(t, err)
	require.NoError(t, create("acct_a", "http://127.0.0.1:2/a"))

	var ds struct{ Data []store.Delivery }
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/ep_shared/deliveries", "", &ds))
	require.Empty(t, ds.Data, "A's token never lists B's deliveries")

	// B's retry as a dispatcher without the account check sent it: to A's
	// receiver, which answered 200.
	now := time.Now().UTC()
	_, err = st.WriteAttempts(ctx, store.WriteAttemptsParams{Now: now, Records: []*attempt.Record{{AttemptID: "att_b_retry",
		DeliveryID: dlv, EventID: "evt_shared", EventType: "invoice.paid", EndpointID: "ep_shared", Account: "acct_b",
		EventCreated: now, Attempt: 2, Tier: b.names.Retry[0], StartedAt: now.Add(time.Second), Duration: time.Millisecond,
		StatusCode: 200, Outcome: attempt.OutcomeDelivered, NextAction: attempt.NextDone, ReplayID: "rpl_x"}}})
	require.NoError(t, err)
	var tl deliveryOut
	require.Equal(t, 200, b.do(t, b.tokB, "GET", "/v1/deliveries/"+dlv, "", &tl))
	require.Equal(t, "dead", tl.Status, "B's delivery is not marked delivered by A's receiver")
	require.Equal(t, 404, b.do(t, b.tokA, "GET", "/v1/deliveries/"+dlv, "", nil))

	// B replays its dead letters: the one for ep_shared is skipped.
	var dry replay.Result
	require.Equal(t, 200, b.do(t, b.tokB, "POST", "/v1/replays", `{"reason":"INC-9","dry_run":true}`, &dry))
	require.EqualValues(t, 2, dry.Matched, "B's dead letters: evt_b and evt_shared")
	require.EqualValues(t, 1, dry.Replayed)
	require.Equal(t, map[string]int64{replay.SkipAccountMismatch: 1}, dry.Skips)

	var started map[string]any
	require.Equal(t, 202, b.do(t, b.tokB, "POST", "/v1/replays", `{"reason":"INC-9"}`, &started))
	var row store.Replay
	wait.For(t, 20*time.Second, "B's replay done", func() bool {
		require.Equal(t, 200, b.do(t, b.tokB, "GET", started["location"].(string), "", &row))
		return row.Status == store.ReplayDone
	})
	require.EqualValues(t, 1, row.Replayed, "evt_b, to B's own endpoint")
	require.EqualValues(t, 1, row.Skipped)
	var prog struct{ Skips map[string]int64 }
	require.NoError(t, json.Unmarshal(row.Progress, &prog))
	require.Equal(t, map[string]int64{replay.SkipAccountMismatch: 1}, prog.Skips, "the audit row keeps the count by reason")

	// What reached the deliveries topic: B's evt_b, to B's endpoint;
	// nothing for ep_shared.
	ends, err := kadm.NewClient(b.cluster.Client(t)).ListEndOffsets(ctx, b.names.Deliveries)
	require.NoError(t, err)
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	require.EqualValues(t, 1, total)
	cl := b.cluster.Client(t, kgo.ConsumeTopics(b.names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pollCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	fs := cl.PollRecords(pollCtx, 10)
	require.NoError(t, fs.Err0())
	require.Len(t, fs.Records(), 1)
	d, err := delivery.Decode(fs.Records()[0])
	require.NoError(t, err)
	require.Equal(t, "evt_b", d.EventID)
	require.Equal(t, b.epB, d.EndpointID)
	require.Equal(t, "acct_b", d.Account)
}

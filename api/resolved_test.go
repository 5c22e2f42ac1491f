package api

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/store"
)

// A dead letter whose delivery a replay delivered since is resolved: the
// API's replays and resends skip it as already_delivered unless the body
// says "include_resolved".
func TestReplaySkipsResolvedDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	rec := attempt.Record{AttemptID: "att_evt_a_replayed", DeliveryID: b.dlvA, EventID: "evt_a", EventType: "invoice.paid",
		EndpointID: b.epA, Account: "acct_a", EventCreated: now, Attempt: 1, Tier: b.names.Deliveries, StartedAt: now.Add(time.Second),
		Duration: time.Millisecond, StatusCode: 200, Outcome: attempt.OutcomeDelivered, NextAction: attempt.NextDone, ReplayID: "rpl_earlier"}
	_, err := b.db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: []*attempt.Record{&rec}, Now: now})
	require.NoError(t, err)

	for _, c := range []struct{ path, body string }{
		{"/v1/replays", `{"reason":"INC-2","dry_run":true`},
		{"/v1/endpoints/" + b.epA + "/resend", `{"since":"1h","dry_run":true`},
	} {
		var res replay.Result
		require.Equal(t, 200, b.do(t, b.tokA, "POST", c.path, c.body+`}`, &res), c.path)
		require.EqualValues(t, 0, res.Replayed, c.path)
		require.Equal(t, map[string]int64{replay.SkipAlreadyDelivered: 1}, res.Skips, c.path)
		require.Empty(t, res.SkippedEndpoints, "a resolved dead letter says nothing of its endpoint")

		res = replay.Result{}
		require.Equal(t, 200, b.do(t, b.tokA, "POST", c.path, c.body+`,"include_resolved":true}`, &res), c.path)
		require.EqualValues(t, 1, res.Replayed, c.path)
		require.Empty(t, res.Skips, c.path)
	}
}

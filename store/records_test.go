package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// Issue 32: a replay's record of what it sent answers per (account,
// delivery) only; an operator's replay lists for the accounts it sent to
// (and the endpoint's view for that endpoint), or that its filter names;
// the attempt-log maintenance prunes records past the retention.
func TestReplaySends(t *testing.T) {
	t.Parallel()
	st := pgtest.New(t).Store
	ctx := context.Background()
	ops, _, err := st.CreateReplay(ctx, store.Replay{ID: "rpl_ops", Kind: "dlq", Actor: "ops", Reason: "all"})
	require.NoError(t, err)
	named, _, err := st.CreateReplay(ctx, store.Replay{ID: "rpl_named", Kind: "dlq", Actor: "ops", Reason: "for c",
		Filter: json.RawMessage(`{"account":"acct_c"}`)})
	require.NoError(t, err)
	_, _, err = st.CreateReplay(ctx, store.Replay{ID: "rpl_mine", Kind: "dlq", Actor: "api:acct_a", Reason: "mine", Account: "acct_a"})
	require.NoError(t, err)
	require.NoError(t, st.RecordReplaySends(ctx, "", ops.ID, []store.ReplaySend{
		{Account: "acct_a", DeliveryID: "dlv_1", EndpointID: "ep_a1"}, {Account: "acct_a", DeliveryID: "dlv_2", EndpointID: "ep_a2"},
		{Account: "acct_b", DeliveryID: "dlv_1", EndpointID: "ep_b"}}))
	require.NoError(t, st.RecordReplaySends(ctx, "acct_a", "rpl_mine", []store.ReplaySend{{Account: "acct_a", DeliveryID: "dlv_3", EndpointID: "ep_a1"}}))

	sent, err := st.LastReplaySends(ctx, []store.DeliveryKey{{Account: "acct_a", ID: "dlv_1"}, {Account: "acct_c", ID: "dlv_1"},
		{Account: "acct_a", ID: "dlv_3"}})
	require.NoError(t, err)
	require.Len(t, sent, 2)
	require.Contains(t, sent, store.DeliveryKey{Account: "acct_a", ID: "dlv_3"})

	list := func(account, ep string) map[string]int64 {
		rs, err := st.ListOperatorReplays(ctx, account, ep, 10)
		require.NoError(t, err)
		out := map[string]int64{}
		for _, r := range rs {
			out[r.ID] = r.Sent
			require.Equal(t, r.ID == named.ID, r.ForAccount)
		}
		return out
	}
	require.Equal(t, map[string]int64{ops.ID: 2}, list("acct_a", ""), "an account's own replays are not the operators'")
	require.Equal(t, map[string]int64{ops.ID: 1}, list("acct_a", "ep_a2"))
	require.Equal(t, map[string]int64{ops.ID: 1}, list("acct_b", ""))
	require.Equal(t, map[string]int64{named.ID: 0}, list("acct_c", ""))
	require.Empty(t, list("acct_d", ""))

	_, err = st.MaintainAttemptPartitions(ctx, time.Now().Add(48*time.Hour), 0, 24*time.Hour)
	require.NoError(t, err)
	sent, err = st.LastReplaySends(ctx, []store.DeliveryKey{{Account: "acct_a", ID: "dlv_1"}})
	require.NoError(t, err)
	require.Empty(t, sent, "pruned past the attempt retention")
}

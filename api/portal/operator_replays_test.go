package portal

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/store"
)

// Issue 32: customers see the replays an operator ran for them, labelled,
// with the count of their own deliveries sent; the reason only when the
// operator named their account. Another account's, and another
// endpoint's view, do not list them.
func TestOperatorReplaysShowToTheirAccounts(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := context.Background()
	ea := b.endpoint(t, "acct_a", "https://a.example.com/hook")
	other := b.endpoint(t, "acct_a", "https://a2.example.com/hook")
	eb := b.endpoint(t, "acct_b", "https://b.example.com/hook")
	b.deadLetter(t, ea, "evt_a1")
	b.deadLetter(t, ea, "evt_a2")
	b.deadLetter(t, eb, "evt_b1")
	be, _ := b.h.backend()

	all, err := replay.Run(ctx, be.Replay, replay.Request{Actor: "ops-ann", Reason: "INC-7 broker outage, all accounts"})
	require.NoError(t, err)
	require.Equal(t, int64(3), all.Replayed)
	// Named for acct_a: nothing left to send, listed with its reason.
	forA, err := replay.Run(ctx, be.Replay, replay.Request{Actor: "ops-ann", Reason: "INC-8 checking acct_a",
		Filter: replay.Filter{Account: "acct_a"}})
	require.NoError(t, err)
	require.Equal(t, int64(0), forA.Replayed)

	replays := func(account, endpointID string) string {
		c := b.client(t)
		p := c.login(b.link(t, account, endpointID, store.PortalRead, time.Hour))
		require.Equal(t, 200, p.Status, p.Body)
		p = c.get("/portal/replays")
		require.Equal(t, 200, p.Status, p.Body)
		return p.Body
	}
	a := replays("acct_a", "")
	require.Contains(t, a, "Run by hookd support")
	require.Contains(t, a, all.ID)
	require.Contains(t, a, forA.ID)
	require.Contains(t, a, "INC-8 checking acct_a")
	require.NotContains(t, a, "INC-7", "an all-accounts reason is not shown to one account")
	require.Regexp(t, `(?s)`+all.ID+`.*?<td data-label="Your deliveries sent" class="num">2</td>`, a)
	require.NotContains(t, a, "ops-ann", "operators are labelled support, not named")

	bPage := replays("acct_b", "")
	require.Contains(t, bPage, all.ID)
	require.NotContains(t, bPage, forA.ID)
	require.Regexp(t, `(?s)`+all.ID+`.*?<td data-label="Your deliveries sent" class="num">1</td>`, bPage)

	require.NotContains(t, replays("acct_a", other.ID), all.ID, "an endpoint's view lists what was sent to it only")
	require.NotContains(t, replays("acct_c", ""), "Run by hookd support")
}

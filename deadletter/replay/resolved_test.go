package replay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// delivered records, as the attempt-log writer would, that a replay
// delivered event evt to ep.
func (b *bundle) delivered(t *testing.T, evt, ep, account string) {
	t.Helper()
	now := time.Now().UTC()
	rec := attempt.Record{AttemptID: "att_" + evt + "_replayed", DeliveryID: delivery.ID(evt, ep), EventID: evt,
		EventType: "invoice.paid", EndpointID: ep, Account: account, EventCreated: now, Attempt: 1, Tier: b.deps.Names.Deliveries,
		StartedAt: now, Duration: time.Millisecond, StatusCode: 200, Outcome: attempt.OutcomeDelivered,
		NextAction: attempt.NextDone, ReplayID: "rpl_earlier"}
	_, err := b.db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: []*attempt.Record{&rec}, Now: now})
	require.NoError(t, err)
}

// Resolved dead letters are skipped by the dry run and the run alike (with
// produce chunks smaller than a batch), and do not use the limit up;
// IncludeResolved replays them.
func TestReplaySkipsResolvedDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 6)
	for i := range 3 {
		b.delivered(t, fmt.Sprintf("ep_a-evt-%d", i), "ep_a", "acct_a")
	}

	req := Request{Actor: "alice", Reason: "INC-4", chunk: 2}
	dry := req
	dry.DryRun = true
	var actions []string
	dry.OnEntry = func(e Entry, action string) { actions = append(actions, e.EventID+": "+action) }
	res, err := Run(ctx, b.deps, dry)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Replayed)
	require.Equal(t, map[string]int64{SkipAlreadyDelivered: 3}, res.Skips)
	require.Contains(t, actions, "ep_a-evt-0: skip: "+skipText[SkipAlreadyDelivered])
	require.Contains(t, actions, "ep_a-evt-5: replay")

	limited := req
	limited.Limit = 2
	res, err = Run(ctx, b.deps, limited)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Replayed, "resolved dead letters do not use the limit up")
	require.NotContains(t, b.replayed(t), "ep_a-evt-0")

	// The limited run's two count as resolved too: it sent them since they
	// were dead-lettered (issue 32).
	res, err = Run(ctx, b.deps, req)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Replayed)
	require.EqualValues(t, 5, res.Skipped)
	require.Equal(t, map[string]int64{SkipAlreadyDelivered: 5}, res.Skips)
	require.Empty(t, res.SkippedEndpoints)

	all := req
	all.IncludeResolved = true
	res, err = Run(ctx, b.deps, all)
	require.NoError(t, err)
	require.NotEqual(t, req.DerivedID(), res.ID, "another request")
	require.EqualValues(t, 6, res.Replayed)
	got := b.replayed(t)
	require.Len(t, got["ep_a-evt-0"], 1)
	require.Len(t, got["ep_a-evt-3"], 2, "limited run, run including resolved")
	require.Len(t, got["ep_a-evt-5"], 2, "beyond the limit: run, run including resolved")
}

// IncludeResolved left false keeps the ids requests had before it existed,
// so re-running an older command still resumes its request.
func TestDerivedIDKeepsOlderRequests(t *testing.T) {
	t.Parallel()
	r := Request{Kind: KindResend, Actor: "bob", Reason: "INC-7", Account: "acct_a", SinceSpec: "24h", Limit: 10,
		Filter: Filter{EndpointID: "ep_a", Since: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}}
	require.Equal(t, "rpl_cb822d1875145bccd8fd", r.DerivedID(), "computed before IncludeResolved existed")
	r.IncludeResolved = true
	require.NotEqual(t, "rpl_cb822d1875145bccd8fd", r.DerivedID())
}

// Over several fetched batches (a poll takes at most 2000 records), read
// one batch ahead with the look-ups in the background: resolved dead
// letters of every batch are skipped, and a run that crashes after an
// acknowledged chunk and resumes replays every other dead letter once.
func TestReplayResolvedOverBatchesAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	const n = 5000
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, n)
	resolved := map[string]bool{}
	for _, i := range []int{10, 2500, 4999} {
		evt := fmt.Sprintf("ep_a-evt-%d", i)
		resolved[evt] = true
		b.delivered(t, evt, "ep_a", "acct_a")
	}

	chunks := 0
	req := Request{Actor: "a", Reason: "r", chunk: 700, afterProduce: func() error {
		if chunks++; chunks == 4 {
			return fmt.Errorf("simulated crash after the broker ack")
		}
		return nil
	}}
	res, err := Run(ctx, b.deps, req)
	require.Error(t, err)
	require.Equal(t, store.ReplayFailed, res.Status)

	req.afterProduce = nil
	res, err = Run(ctx, b.deps, req)
	require.NoError(t, err)
	require.Equal(t, store.ReplayDone, res.Status)
	require.EqualValues(t, n-3, res.Replayed)
	require.EqualValues(t, 3, res.Skipped)
	require.Equal(t, map[string]int64{SkipAlreadyDelivered: 3}, res.Skips)
	got := b.replayed(t)
	require.Len(t, got, n-3)
	for evt, recs := range got {
		require.False(t, resolved[evt], "resolved, yet replayed: %s", evt)
		require.Len(t, recs, 1, "replayed twice: %s", evt)
	}
}

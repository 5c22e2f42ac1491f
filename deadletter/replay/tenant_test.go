package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// deadLettersOf produces n dead letters of account for endpoint ep, event
// ids "<prefix>-evt-<i>".
func (b *bundle) deadLettersOf(t *testing.T, ep, account, prefix string, n int) {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		evt := fmt.Sprintf("%s-evt-%d", prefix, i)
		body, err := delivery.Body(evt, "invoice.paid", time.Now(), []byte(`{"i":1}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: account,
			EventCreated: time.Now(), Attempt: 5, Body: body}
		src := d.Record(b.deps.Names.Retry[0])
		src.Partition = partitionOf(ep, 4)
		recs = append(recs, deadletter.Record(b.deps.Names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic,
			Attempts: 5, LastStatus: 503, Reason: deadletter.ReasonRetriesExhausted, DeadAt: time.Now()}))
	}
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

// Issue 11 item 1, at replay: account B's dead letters for ep_shared,
// whose id account A now holds (taken over before ids were kept), are
// never sent to A's endpoint, by B's replay, an operator's, or a resend.
func TestReplaySkipsAccountMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_shared", "acct_a", endpoint.StatusActive)
	b.deadLettersOf(t, "ep_shared", "acct_b", "b", 3)
	b.deadLettersOf(t, "ep_shared", "acct_a", "a", 2)

	// B's own replay (an account token): nothing sent, each one counted.
	var actions []string
	res, err := Run(ctx, b.deps, Request{Actor: "api:acct_b", Reason: "retry mine", Account: "acct_b", DryRun: true,
		OnEntry: func(_ Entry, action string) { actions = append(actions, action) }})
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Matched)
	require.Zero(t, res.Replayed)
	require.EqualValues(t, 3, res.Skipped)
	require.Equal(t, map[string]int64{SkipAccountMismatch: 3}, res.Skips, "the dry run reports the reason")
	require.Contains(t, res.SkippedEndpoints["ep_shared"], SkipAccountMismatch)
	require.Len(t, actions, 3)
	for _, a := range actions {
		require.True(t, strings.HasPrefix(a, "skip: "+SkipAccountMismatch), a)
	}
	res, err = Run(ctx, b.deps, Request{Actor: "api:acct_b", Reason: "retry mine", Account: "acct_b"})
	require.NoError(t, err)
	require.Equal(t, store.ReplayDone, res.Status)
	require.Zero(t, res.Replayed)
	require.EqualValues(t, 3, res.Skipped)
	require.Equal(t, map[string]int64{SkipAccountMismatch: 3}, res.Skips)
	require.Empty(t, b.replayed(t), "none of B's records was sent")
	row, err := b.db.Store.GetReplay(ctx, res.ID)
	require.NoError(t, err)
	var prog progress
	require.NoError(t, json.Unmarshal(row.Progress, &prog))
	require.Equal(t, map[string]int64{SkipAccountMismatch: 3}, prog.Skips, "the audit row keeps the count by reason")

	// B cannot resend to A's endpoint at all.
	_, err = Run(ctx, b.deps, Request{Kind: KindResend, Actor: "api:acct_b", Reason: "r", Account: "acct_b",
		Filter: Filter{EndpointID: "ep_shared"}})
	require.ErrorIs(t, err, ErrEndpointNotFound)

	// An operator's replay or resend of the endpoint sends A's records only
	// (the resend including those the replay just sent: resolved).
	for _, req := range []Request{
		{Actor: "ops", Reason: "outage"},
		{Kind: KindResend, Actor: "ops", Reason: "resend", Filter: Filter{EndpointID: "ep_shared"}, IncludeResolved: true},
	} {
		res, err = Run(ctx, b.deps, req)
		require.NoError(t, err)
		require.EqualValues(t, 5, res.Matched, req.Kind)
		require.EqualValues(t, 2, res.Replayed, req.Kind)
		require.Equal(t, map[string]int64{SkipAccountMismatch: 3}, res.Skips, req.Kind)
	}
	got := b.replayed(t)
	require.Len(t, got, 2)
	for evt, recs := range got {
		require.True(t, strings.HasPrefix(evt, "a-"), evt)
		require.Len(t, recs, 2, "once per operator request")
		for _, r := range recs {
			d, err := delivery.Decode(r)
			require.NoError(t, err)
			require.Equal(t, "acct_a", d.Account)
		}
	}
}

// Issue 11 item 5: a reason or actor that cannot be stored as is (NUL,
// invalid UTF-8) or is absurdly long is refused as invalid, naming the
// field, before anything is written.
func TestReplayRefusesBadText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.deadLettersOf(t, "ep_a", "acct_a", "a", 1)
	for _, c := range []struct {
		name, actor, reason, field string
	}{
		{"nul reason", "alice", "outage\x00INC-1", "reason"},
		{"nul actor", "al\x00ice", "outage", "actor"},
		{"invalid utf-8 reason", "alice", "outage \xff", "reason"},
		{"long reason", "alice", strings.Repeat("r", MaxReasonLen+1), "reason"},
		{"long actor", strings.Repeat("a", MaxActorLen+1), "outage", "actor"},
	} {
		for _, dry := range []bool{false, true} {
			_, err := Run(ctx, b.deps, Request{Actor: c.actor, Reason: c.reason, DryRun: dry})
			require.ErrorIs(t, err, ErrInvalid, c.name)
			require.ErrorContains(t, err, c.field+":", c.name)
			_, err = Prepare(ctx, b.deps, Request{Actor: c.actor, Reason: c.reason})
			require.ErrorIs(t, err, ErrInvalid, c.name)
		}
	}
	rows, err := b.db.Store.ListReplays(ctx, store.ListReplaysParams{})
	require.NoError(t, err)
	require.Empty(t, rows, "nothing half-written")
	require.Empty(t, b.replayed(t))

	// At the limit, in characters (not bytes), it is fine.
	res, err := Run(ctx, b.deps, Request{Actor: "alice", Reason: strings.Repeat("é", MaxReasonLen)})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Replayed)
}

// Prepare writes the audit row before anything runs, so an API can answer
// 202 pointing at a row that exists.
func TestPrepareWritesTheAuditRowFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.deadLettersOf(t, "ep_a", "acct_a", "a", 2)
	req := Request{Actor: "alice", Reason: "outage", Account: "acct_a"}
	p, err := Prepare(ctx, b.deps, req)
	require.NoError(t, err)
	row, err := b.db.Store.GetReplay(ctx, p.Row().ID)
	require.NoError(t, err)
	require.Equal(t, store.ReplayRunning, row.Status)
	require.Equal(t, "acct_a", row.Account)
	require.Empty(t, b.replayed(t), "nothing sent before Run")

	res, err := p.Run(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Replayed)
	p, err = Prepare(ctx, b.deps, req)
	require.NoError(t, err)
	require.Equal(t, store.ReplayDone, p.Row().Status, "the same request finds its done row")
	res, err = p.Run(ctx)
	require.NoError(t, err)
	require.True(t, res.AlreadyDone)

	// Another account naming that id explicitly gets a row of its own
	// (issue 29: ids are per account), never A's done one.
	p, err = Prepare(ctx, b.deps, Request{ID: row.ID, Actor: "mallory", Reason: "outage", Account: "acct_b"})
	require.NoError(t, err)
	require.Equal(t, "acct_b", p.Row().Account)
	require.Equal(t, store.ReplayRunning, p.Row().Status)
	// An operator naming it is refused: its records would look like A's.
	_, err = Prepare(ctx, b.deps, Request{ID: row.ID, Actor: "ops", Reason: "outage"})
	require.ErrorIs(t, err, ErrRequestMismatch)
	_, err = Prepare(ctx, b.deps, Request{Actor: "alice", Reason: "outage", DryRun: true})
	require.ErrorIs(t, err, ErrInvalid)
}

// Issue 29: an account's replay counts the account's own dead letters as
// scanned, not every record of the DLQ ranges it reads, and AccountView
// shows it no DLQ partitions or offsets.
func TestAccountReplayCountsOwnDeadLettersOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.endpoint(t, "ep_b", "acct_b", endpoint.StatusActive)
	b.deadLettersOf(t, "ep_a", "acct_a", "a", 2)
	b.deadLettersOf(t, "ep_b", "acct_b", "b", 3)

	res, err := Run(ctx, b.deps, Request{Actor: "api:acct_a", Reason: "mine", Account: "acct_a"})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Replayed)
	var prog progress
	require.NoError(t, json.Unmarshal(res.Progress, &prog))
	require.EqualValues(t, 2, prog.Scanned, "A's two, not the five on the DLQ")
	require.JSONEq(t, `{"scanned":2}`, string(AccountView(res.Replay).Progress))

	res, err = Run(ctx, b.deps, Request{Actor: "ops", Reason: "all"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(res.Progress, &prog))
	require.EqualValues(t, 5, prog.Scanned, "an operator's replay counts every record it reads")
	require.NotEmpty(t, prog.Ranges)
}

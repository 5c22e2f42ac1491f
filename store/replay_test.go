package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/store"
)

// Issue 29: replay ids are per account (migration 15). Two accounts may
// each have a replay "nightly", and neither one's create, read, update
// or lock touches the other's; an operator's replay (account "") cannot
// take an account's id, nor an account an operator's.
func TestReplayIDsArePerAccount(t *testing.T) {
	t.Parallel()
	st := pgtest.New(t).Store
	ctx := context.Background()
	a, created, err := st.CreateReplay(ctx, store.Replay{ID: "nightly", Kind: "dlq", Actor: "api:acct_a", Reason: "A's", Account: "acct_a"})
	require.NoError(t, err)
	require.True(t, created)
	b, created, err := st.CreateReplay(ctx, store.Replay{ID: "nightly", Kind: "dlq", Actor: "api:acct_b", Reason: "B's", Account: "acct_b"})
	require.NoError(t, err)
	require.True(t, created, "B's id is B's own")
	require.Equal(t, "B's", b.Reason)
	again, created, err := st.CreateReplay(ctx, store.Replay{ID: "nightly", Kind: "dlq", Actor: "x", Reason: "other", Account: "acct_a"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, a.Reason, again.Reason, "the same account finds its row")

	_, _, err = st.CreateReplay(ctx, store.Replay{ID: "nightly", Kind: "dlq", Actor: "ops", Reason: "ops"})
	require.ErrorIs(t, err, store.ErrReplayIDTaken)
	_, _, err = st.CreateReplay(ctx, store.Replay{ID: "ops-1", Kind: "dlq", Actor: "ops", Reason: "ops"})
	require.NoError(t, err)
	_, _, err = st.CreateReplay(ctx, store.Replay{ID: "ops-1", Kind: "dlq", Actor: "api:acct_a", Reason: "A's", Account: "acct_a"})
	require.ErrorIs(t, err, store.ErrReplayIDTaken)

	got, err := st.GetAccountReplay(ctx, "acct_b", "nightly")
	require.NoError(t, err)
	require.Equal(t, "B's", got.Reason)
	_, err = st.GetAccountReplay(ctx, "acct_c", "nightly")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.GetReplay(ctx, "nightly")
	require.ErrorIs(t, err, store.ErrReplayAmbiguous)
	got, err = st.GetReplay(ctx, "ops-1")
	require.NoError(t, err)
	require.Empty(t, got.Account)

	require.NoError(t, st.UpdateReplay(ctx, store.ReplayUpdate{Account: "acct_b", ID: "nightly", Replayed: 7,
		Progress: json.RawMessage(`{}`), Status: store.ReplayDone}))
	got, err = st.GetAccountReplay(ctx, "acct_a", "nightly")
	require.NoError(t, err)
	require.Zero(t, got.Replayed, "B's update leaves A's row alone")
	require.Equal(t, store.ReplayRunning, got.Status)

	lockB, err := st.LockReplay(ctx, "acct_b", "nightly")
	require.NoError(t, err)
	defer lockB.Unlock()
	lockA, err := st.LockReplay(ctx, "acct_a", "nightly")
	require.NoError(t, err, "B's run does not hold A's")
	lockA.Unlock()
	_, err = st.LockReplay(ctx, "acct_b", "nightly")
	require.ErrorIs(t, err, store.ErrReplayBusy)
}

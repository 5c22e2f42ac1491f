package api

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
)

// waitReplay polls GET /v1/replays/{id} with token until the replay is
// done.
func (b *bundle) waitReplay(t *testing.T, token, id string) store.Replay {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var row store.Replay
	for row.Status != store.ReplayDone {
		require.Equal(t, 200, b.do(t, token, "GET", "/v1/replays/"+id, "", &row))
		select {
		case <-ctx.Done():
			t.Fatalf("replay %s not done: %+v", id, row)
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	return row
}

// Issue 29: replay ids are per account. B choosing the id A chose neither
// tells B that A has it nor stops B (it was a global 409 "taken by a
// different request"); each reads its own. The admin token names the
// account when several have the id, and an operator replay cannot take
// an account's id (its records would look like the operator's).
func TestReplayIDsArePerAccount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var started map[string]any
	require.Equal(t, 202, b.do(t, b.tokA, "POST", "/v1/replays", `{"id":"nightly","reason":"A's"}`, &started))
	require.Equal(t, "nightly", started["id"])
	rowA := b.waitReplay(t, b.tokA, "nightly")

	var e apiError
	require.Equal(t, 202, b.do(t, b.tokB, "POST", "/v1/replays", `{"id":"nightly","reason":"B's"}`, &e), "%+v", e)
	rowB := b.waitReplay(t, b.tokB, "nightly")
	require.Equal(t, "acct_b", rowB.Account)
	require.Equal(t, "B's", rowB.Reason)
	require.EqualValues(t, 1, rowB.Replayed)
	var again store.Replay
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/replays/nightly", "", &again))
	require.Equal(t, "A's", again.Reason, "A still reads its own")
	require.Equal(t, rowA.CreatedAt, again.CreatedAt)

	// The same id with another request of the same account is still 409.
	require.Equal(t, 409, b.do(t, b.tokA, "POST", "/v1/replays", `{"id":"nightly","reason":"other"}`, &e))
	require.NotContains(t, e.Error.Message, "B's")

	require.Equal(t, 409, b.do(t, adminToken, "GET", "/v1/replays/nightly", "", &e))
	require.Contains(t, e.Error.Message, "?account=")
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/replays/nightly?account=acct_b", "", &again))
	require.Equal(t, "B's", again.Reason)
	require.Equal(t, 400, b.do(t, b.tokA, "GET", "/v1/replays/nightly?account=acct_b", "", &e))
	require.Equal(t, 409, b.do(t, adminToken, "POST", "/v1/replays", `{"id":"nightly","reason":"ops"}`, &e),
		"an operator replay cannot take an account's id")
}

// Issue 29: a replay's progress, as an account sees it, counts only that
// account's dead letters and shows no DLQ partitions or offsets (which
// span every account's); the admin token sees the whole progress.
func TestReplayProgressShowsOwnDeadLettersOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, evt := range []string{"evt_b2", "evt_b3", "evt_b4"} {
		b.delivery(t, evt, b.epB, "acct_b")
	}
	var started map[string]any
	require.Equal(t, 202, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"mine"}`, &started))
	id := started["id"].(string)
	row := b.waitReplay(t, b.tokA, id)
	require.EqualValues(t, 1, row.Replayed)
	var prog map[string]any
	require.NoError(t, json.Unmarshal(row.Progress, &prog))
	require.Equal(t, map[string]any{"scanned": float64(1)}, prog, "A's one dead letter, of 5 on the DLQ")

	var rs struct{ Data []store.Replay }
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/replays", "", &rs))
	require.Len(t, rs.Data, 1)
	require.JSONEq(t, `{"scanned":1}`, string(rs.Data[0].Progress))

	var full store.Replay
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/replays/"+id, "", &full))
	require.Contains(t, string(full.Progress), `"ranges"`, "the admin token sees where the replay is")
}

package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Background replays are capped per account and per process: beyond the
// cap a replay answers 429 too_many_replays with Retry-After at once,
// writes nothing, and the rest of the API keeps answering (slow replays
// used to pile up until they held every Postgres connection).
func TestReplaysAreCappedPerAccountAndProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 { // enough dead letters that a replay at 0.2/s runs for a while
		b.delivery(t, fmt.Sprintf("evt_a_%d", i), b.epA, "acct_a")
		b.delivery(t, fmt.Sprintf("evt_b_%d", i), b.epB, "acct_b")
	}
	base := b.server(t, V1Config{MaxReplays: 3, MaxReplaysPerAccount: 2})
	post := func(token, reason string) (int, apiError) {
		var e apiError
		code := call(t, base, token, "POST", "/v1/replays", `{"reason":"`+reason+`","rate":0.2}`, &e)
		return code, e
	}
	for i := range 2 {
		code, _ := post(b.tokA, fmt.Sprintf("INC-a%d", i))
		require.Equal(t, 202, code)
	}
	start := time.Now()
	code, e := post(b.tokA, "INC-a2")
	require.Equal(t, 429, code, "the account's third replay")
	require.Equal(t, "too_many_replays", e.Error.Code)
	require.Contains(t, e.Error.Message, "at most 2 per account")
	require.Less(t, time.Since(start), 2*time.Second)
	req, err := http.NewRequest("POST", base+"/v1/replays", strings.NewReader(`{"reason":"INC-a3"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.tokA)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, replayRetryAfter, resp.Header.Get("Retry-After"))

	code, _ = post(b.tokB, "INC-b0")
	require.Equal(t, 202, code, "another account still may")
	code, e = post(b.tokB, "INC-b1")
	require.Equal(t, 429, code, "the process's fourth replay")
	require.Equal(t, "too_many_replays", e.Error.Code)

	// Nothing was written for the refused ones; the API still answers.
	var list struct{ Data []map[string]any }
	require.Equal(t, 200, call(t, base, adminToken, "GET", "/v1/replays", "", &list))
	require.Len(t, list.Data, 3)
	require.Equal(t, 200, call(t, base, b.tokB, "GET", "/v1/endpoints", "", nil))
	// Dry runs are not capped.
	require.Equal(t, 200, call(t, base, b.tokA, "POST", "/v1/replays", `{"reason":"look","dry_run":true}`, nil))
}

func TestReplaySlots(t *testing.T) {
	t.Parallel()
	var s replaySlots
	require.True(t, s.acquire("a", 2, 1))
	require.False(t, s.acquire("a", 2, 1), "per account")
	require.True(t, s.acquire("b", 2, 1))
	require.False(t, s.acquire("c", 2, 1), "in all")
	s.release("a")
	require.True(t, s.acquire("c", 2, 1))
	require.Equal(t, map[string]int{"b": 1, "c": 1}, s.byAccount)
}

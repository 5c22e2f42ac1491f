package cli_test

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
)

// timedDeadLetters produces one dead letter per entry of parts, the i-th
// on partition parts[i] and dead-lettered at base + i seconds, with event
// id evt_t<i>; partition 0's are produced first.
func (e *env) timedDeadLetters(t *testing.T, base time.Time, parts []int32) {
	t.Helper()
	recs := make([]*kgo.Record, 0, len(parts))
	for p := range int32(e.parts) {
		for i, part := range parts {
			if part != p {
				continue
			}
			evt := fmt.Sprintf("evt_t%d", i)
			body, err := delivery.Body(evt, "invoice.paid", base, []byte(`{}`))
			require.NoError(t, err)
			d := delivery.Delivery{ID: delivery.ID(evt, "ep_o"), EventID: evt, EventType: "invoice.paid", EndpointID: "ep_o",
				Account: "acct_o", EventCreated: base, Attempt: 3, Body: body}
			src := d.Record(e.names.Retry[0])
			src.Partition = part
			at := base.Add(time.Duration(i) * time.Second)
			r := deadletter.Record(e.names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic, Attempts: 3,
				Reason: deadletter.ReasonRetriesExhausted, DeadAt: at})
			r.Timestamp = at
			recs = append(recs, r)
		}
	}
	cl := e.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

// Issue 13 item 10: dlq list prints in dead-letter time order (oldest
// first), not partition by partition; --limit keeps the oldest.
func TestDLQListInTimeOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	e.timedDeadLetters(t, base, []int32{2, 1, 0, 2, 2, 1, 0, 0})
	want := []string{"evt_t0", "evt_t1", "evt_t2", "evt_t3", "evt_t4", "evt_t5", "evt_t6", "evt_t7"}

	code, out, errOut := e.run(t, "dlq", "list")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, want, eventIDsIn(out))

	code, out, errOut = e.run(t, "dlq", "list", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var entries []struct {
		EventID string `json:"event_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	got := make([]string, 0, len(entries))
	for _, en := range entries {
		got = append(got, en.EventID)
	}
	require.Equal(t, want, got)

	code, out, errOut = e.run(t, "dlq", "list", "--limit", "3")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, want[:3], eventIDsIn(out))
	require.Contains(t, out, "3 dead letter(s) (stopped at --limit 3)")

	code, out, _ = e.run(t, "dlq", "list", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "oldest first")
}

// eventIDsIn returns the evt_t ids of a table, in order.
func eventIDsIn(out string) []string {
	var ids []string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "evt_t") {
			ids = append(ids, f)
		}
	}
	return ids
}

package replay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
)

// timedDeadLetters produces perPart dead letters on each of partitions
// 3, 2, 1 and 0 (in that order), the i-th of partition p dead-lettered at
// base + (i*4 + p) ms: time order interleaves the partitions.
func (b *bundle) timedDeadLetters(t *testing.T, base time.Time, perPart int) {
	t.Helper()
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(3); p >= 0; p-- {
		recs := make([]*kgo.Record, 0, perPart)
		for i := range perPart {
			evt := fmt.Sprintf("evt_p%d_%05d", p, i)
			body, err := delivery.Body(evt, "invoice.paid", base, []byte(`{}`))
			require.NoError(t, err)
			d := delivery.Delivery{ID: delivery.ID(evt, "ep_t"), EventID: evt, EventType: "invoice.paid", EndpointID: "ep_t",
				Account: "acct_t", EventCreated: base, Attempt: 5, Body: body}
			src := d.Record(b.deps.Names.Retry[0])
			src.Partition = p
			at := base.Add(time.Duration(i*4+int(p)) * time.Millisecond)
			r := deadletter.Record(b.deps.Names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic, Attempts: 5,
				Reason: deadletter.ReasonRetriesExhausted, DeadAt: at})
			r.Timestamp = at
			recs = append(recs, r)
		}
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
}

// ScanByTime merges the partitions by dead-letter time, over many polls
// (more records than one poll takes, so partitions are paused and resumed
// with fetched data still buffered), and an early stop returns the oldest.
func TestScanByTimeMergesPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const perPart = 3000
	b.timedDeadLetters(t, base, perPart)
	ctx := context.Background()

	var got []time.Time
	seen := map[string]bool{}
	st, err := ScanByTime(ctx, b.deps, Filter{}, func(e Entry) error {
		require.False(t, seen[e.EventID], "twice: %s", e.EventID)
		seen[e.EventID] = true
		got = append(got, e.DeadAt)
		return nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 4*perPart, st.Matched)
	require.Len(t, got, 4*perPart)
	for i, at := range got {
		require.True(t, at.Equal(base.Add(time.Duration(i)*time.Millisecond)), "entry %d dead at %s", i, at)
	}

	var first []string
	_, err = ScanByTime(ctx, b.deps, Filter{}, func(e Entry) error {
		if len(first) == 6 {
			return errStop
		}
		first = append(first, e.EventID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"evt_p0_00000", "evt_p1_00000", "evt_p2_00000", "evt_p3_00000", "evt_p0_00001", "evt_p1_00001"}, first)

}

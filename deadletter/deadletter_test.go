package deadletter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
)

func TestRecordKeepsKeyValueAndHeaders(t *testing.T) {
	t.Parallel()
	src := &kgo.Record{
		Topic: "webhooks.retry.24h", Partition: 7, Offset: 42,
		Key: []byte("ep_1"), Value: []byte(`{"id":"evt_1"}`),
		Headers: []kgo.RecordHeader{
			{Key: "hookd-event-id", Value: []byte("evt_1")},
			{Key: deadletter.HeaderReason, Value: []byte("stale from a replayed dead letter")},
		},
	}
	first := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	p := deadletter.Provenance{
		OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
		Attempts: 11, FirstAttempt: first, LastAttempt: first.Add(48 * time.Hour),
		LastStatus: 503, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted,
		DeadAt: first.Add(48 * time.Hour),
	}
	r := deadletter.Record("webhooks.dlq", src, p)
	require.Equal(t, "webhooks.dlq", r.Topic)
	require.Equal(t, int32(7), r.Partition)
	require.Equal(t, src.Key, r.Key)
	require.Same(t, &src.Value[0], &r.Value[0], "value is the original bytes")
	require.Equal(t, "hookd-event-id", r.Headers[0].Key)

	reasons := 0
	for _, h := range r.Headers {
		if h.Key == deadletter.HeaderReason {
			reasons++
		}
	}
	require.Equal(t, 1, reasons, "stale provenance headers are replaced")

	got, err := deadletter.Read(r)
	require.NoError(t, err)
	require.Equal(t, p, got)

	_, err = deadletter.Read(&kgo.Record{Key: src.Key, Value: src.Value})
	require.Error(t, err, "a record without a reason is not a dead letter")
}

func TestSummaryRecordIsSmallAndReadable(t *testing.T) {
	t.Parallel()
	dead := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := deadletter.Summary{OutboxID: "row_1", EventID: "row_1", Account: "acctA", EventType: "inv.paid",
		Created: dead.Add(-time.Second), Size: 2 << 20, Limit: 256 << 10, Detail: strings.Repeat("d", 10000)}
	p := deadletter.Provenance{ErrorClass: "oversize", Reason: deadletter.ReasonOversize, DeadAt: dead}
	r := deadletter.SummaryRecord("webhooks.dlq", []byte("acctA"), s, p)
	require.Equal(t, "webhooks.dlq", r.Topic)
	require.Equal(t, "acctA", string(r.Key))
	require.Less(t, len(r.Value), 1024, "the summary never carries the original value")

	h := map[string]string{}
	for _, x := range r.Headers {
		require.NotContains(t, h, x.Key, "header %s twice", x.Key)
		h[x.Key] = string(x.Value)
	}
	require.Equal(t, map[string]string{
		deadletter.HeaderOutboxID: "row_1", deadletter.HeaderEventID: "row_1", deadletter.HeaderAccount: "acctA",
		deadletter.HeaderEventType: "inv.paid", deadletter.HeaderSize: "2097152", deadletter.HeaderLimit: "262144",
		deadletter.HeaderDetail: strings.Repeat("d", 512) + "...", deadletter.HeaderAttempts: "0",
		deadletter.HeaderErrorClass: "oversize", deadletter.HeaderReason: "oversize", deadletter.HeaderDeadAt: "2026-01-02T03:04:05Z",
	}, h, "no origin partition or offset without an origin topic")

	got, err := deadletter.Read(r)
	require.NoError(t, err)
	require.Equal(t, p, got)
	sum, err := deadletter.ReadSummary(r)
	require.NoError(t, err)
	s.Detail = strings.Repeat("d", 512) + "..."
	require.Equal(t, s, sum)
	require.Contains(t, string(r.Value), `"reason":"oversize"`)
}
